/** Boots the real gateway from a YAML config on 127.0.0.1:0, capturing its log lines. */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import { stringify } from 'yaml'
import type { FastifyInstance } from 'fastify'
import { buildGateway, type GatewayOptions } from '../../src/server/gateway.js'
import type { RevocationCheck } from '../../src/authn/authenticator.js'
import { loadConfig } from '../../src/check/load.js'
import { lineCollector } from './logs.js'

export interface RunningGateway {
  app: FastifyInstance
  url: string
  port: number
  /** Every log line written so far, raw JSON text. */
  logs: string[]
  /** Every audit line written so far (when the config names no audit destination). */
  audit: string[]
  /** The decision endpoint's URL (issue 23), listening on 127.0.0.1:0, when the config has `decision:`. */
  decisionUrl: string | undefined
  close(): Promise<void>
}

export interface StartOptions {
  now?: () => number
  /** The config file's directory (relative paths resolve against it); default a fresh temp dir. */
  dir?: string
  env?: NodeJS.ProcessEnv
  /** Passed to buildGateway: the revocation check consulted on every request, cache hits included. */
  isRevoked?: RevocationCheck
  /** Listen on this port instead of an ephemeral one (an embedded issuer URL must name the real port). */
  port?: number
  /** Passed to buildGateway: a worker's channels under `server.workers`. */
  workers?: GatewayOptions['workers']
}

export async function startGateway(config: Record<string, unknown>, options: StartOptions = {}): Promise<RunningGateway> {
  const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), 'portcullis-test-'))
  const file = path.join(dir, 'portcullis.yaml')
  const text = stringify(config)
  writeFileSync(file, text)
  const { lines: logs, stream: logStream } = lineCollector()
  const audit: string[] = []
  const auditStream = new Writable({ write(chunk, _encoding, callback) { audit.push(String(chunk)); callback() } })
  const loaded = loadConfig(file, text, options.env ?? process.env)
  const app = await buildGateway(loaded, {
    logStream,
    // The audit trail goes to stdout unless the config names a destination; tests keep it here instead.
    ...(loaded.audit?.output === undefined && { auditStream }),
    ...(options.now && { now: options.now }),
    ...(options.isRevoked && { isRevoked: options.isRevoked }),
    ...(options.workers && { workers: options.workers }),
  })
  await app.listen({ host: '127.0.0.1', port: options.port ?? 0 })
  const { port } = app.server.address() as AddressInfo
  const scheme = (config.server as { tls?: unknown } | undefined)?.tls ? 'https' : 'http'
  let decisionUrl: string | undefined
  const decisionServer = app.decisionServer
  if (decisionServer) {
    await new Promise<void>((resolve) => decisionServer.listen(0, '127.0.0.1', resolve))
    const decisionScheme = (config.decision as { tls?: unknown }).tls ? 'https' : 'http'
    decisionUrl = `${decisionScheme}://127.0.0.1:${(decisionServer.address() as AddressInfo).port}`
  }
  return { app, url: `${scheme}://127.0.0.1:${port}`, port, logs, audit, decisionUrl, close: () => app.close() }
}

/** A config with one upstream, one issuer and the given routes (default: one protected catch-all). */
export function testConfig(parts: {
  upstream: { url: string }
  issuer?: { issuer: string; jwksUri: string; audience: string }
  routes?: Record<string, unknown>[]
  issuerExtra?: Record<string, unknown>
  upstreamExtra?: Record<string, unknown>
  forward?: Record<string, unknown>
  server?: Record<string, unknown>
}): Record<string, unknown> {
  return {
    server: { realm: 'test', ...parts.server },
    upstreams: { main: { url: parts.upstream.url, timeout: '2s', ...parts.upstreamExtra } },
    ...(parts.issuer && {
      issuers: [{
        issuer: parts.issuer.issuer,
        jwks_uri: parts.issuer.jwksUri,
        audience: [parts.issuer.audience],
        algorithms: ['ES256', 'RS256'],
        ...parts.issuerExtra,
      }],
    }),
    routes: parts.routes ?? [{ id: 'all', path: '/**', upstream: 'main', auth: 'required' }],
    ...(parts.forward && { forward: parts.forward }),
    log: { level: 'debug' },
  }
}

/** Raw HTTP/1.1 over TCP, for requests fetch() refuses to send (bad paths, duplicate headers). */
export async function rawRequest(port: number, text: string): Promise<{ status: number; headers: string; body: string; raw: string }> {
  const net = await import('node:net')
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text))
    let raw = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { raw += chunk })
    socket.on('error', reject)
    socket.on('end', () => {
      const [head = '', ...rest] = raw.split('\r\n\r\n')
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), headers: head, body: rest.join('\r\n\r\n'), raw })
    })
    setTimeout(() => socket.end(), 3000).unref()
  })
}

export function addressOf(app: FastifyInstance): AddressInfo {
  return app.server.address() as AddressInfo
}

/**
 * A gateway with the embedded authorization server on a port chosen first, so that `issuer` is its real
 * URL (strict clients fetch the endpoints the metadata names). `authorizationServer` is merged over a
 * memory store, and `extra` over the rest of the config.
 */
export async function startAuthServerGateway(authorizationServer: Record<string, unknown>,
  extra: Record<string, unknown> = {}, options: StartOptions = {}): Promise<RunningGateway & { issuer: string }> {
  const { closedPort } = await import('./upstream.js')
  const port = options.port ?? await closedPort()
  const issuer = `http://127.0.0.1:${port}`
  const gateway = await startGateway({
    upstreams: { echo: { url: 'builtin:echo' } },
    routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
    log: { level: 'debug' },
    ...extra,
    authorization_server: { enabled: true, issuer, store: { type: 'memory' }, ...authorizationServer },
  }, { ...options, port })
  return { ...gateway, issuer }
}
