/**
 * The README's "gRPC services" session as written: examples/grpc/service.mjs and examples/grpc/client.mjs run as
 * their own processes, Portcullis on examples/grpc/portcullis.yaml with only its addresses changed (what the
 * file's header says to change) and a memory store.
 */
import { execFile, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { startGateway } from '../support/gateway.js'
import { closedPort } from '../support/upstream.js'

const run = promisify(execFile)

describe('examples/grpc', () => {
  it('the client gets a token, calls through Portcullis, and sees 16 and 7 where the token does not do', async ({ onTestFinished }) => {
    const service = spawn(process.execPath, ['examples/grpc/service.mjs', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] })
    onTestFinished(() => { service.kill() })
    const servicePort = await new Promise<number>((resolve, reject) => {
      service.stdout.setEncoding('utf8').on('data', (line: string) => {
        const match = /on 127\.0\.0\.1:(\d+)/.exec(line)
        if (match) resolve(Number(match[1]))
      })
      service.on('exit', (code) => reject(new Error(`the service exited (${code})`)))
    })
    const port = await closedPort()
    const text = readFileSync('examples/grpc/portcullis.yaml', 'utf8')
      .replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`).replaceAll('127.0.0.1:50051', `127.0.0.1:${servicePort}`)
    const config = parse(text) as { authorization_server: Record<string, unknown> }
    config.authorization_server.store = { type: 'memory' }
    const gateway = await startGateway(config, { port })
    onTestFinished(() => gateway.close())
    const { stdout } = await run(process.execPath, ['examples/grpc/client.mjs', gateway.url], { timeout: 20_000 })
    expect(stdout.trim().split('\n')).toEqual([
      'Unary with a grpc:call token: echo: hello (for grpc-demo)',
      'Unary without a token: 16 UNAUTHENTICATED: unauthorized: a Bearer access token is required',
      'Admin with a grpc:call token: 7 PERMISSION_DENIED: insufficient_scope: the access token lacks a required scope',
      'Admin with a grpc:admin token: admin: hello (for grpc-demo)',
    ])
  })
})
