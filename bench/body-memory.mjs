// Many slow clients each sending a body the gateway reads into memory (a form on a route that may see tokens is
// read whole, up to max_body_size): the process's RSS with `server.body_memory` at its default and off. A
// measurement, not a test.
//   npm run build && node bench/body-memory.mjs [--clients 400] [--sent-mb 2]
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'

const { values: opts } = parseArgs({ options: { clients: { type: 'string', default: '400' }, 'sent-mb': { type: 'string', default: '2' } } })
const CLIENTS = Number(opts.clients)
const SENT = Number(opts['sent-mb']) * 1024 * 1024
const root = path.join(import.meta.dirname, '..')

async function run(budget) {
  const port = 20000 + Math.floor(Math.random() * 20000)
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bodymem-'))
  const file = path.join(dir, 'portcullis.yaml')
  writeFileSync(file, [
    `server: { listen: "127.0.0.1:${port}", body_memory: ${budget}, body_timeout: 60s, body_min_rate: 0b, max_body_size: 10mb }`,
    'log: { level: warn }',
    'upstreams: { echo: { url: "builtin:echo" } }',
    'issuers: [ { issuer: "https://issuer.example/", jwks_uri: "https://issuer.example/jwks", audience: [api] } ]',
    'routes: [ { id: form, path: "/form/**", upstream: echo, auth: optional } ]',
  ].join('\n'))
  const child = spawn(process.execPath, ['--max-semi-space-size=64', path.join(root, 'dist/cli.js'), 'start', '--config', file], { stdio: 'ignore' })
  for (let i = 0; ; i++) {
    const up = await new Promise((resolve) => net.connect(port, '127.0.0.1').on('connect', function () { this.destroy(); resolve(true) }).on('error', () => resolve(false)))
    if (up) break
    if (i > 100) throw new Error('portcullis did not start')
    await sleep(100)
  }
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) / 1024
  const before = rss()
  const statuses = []
  const sockets = []
  const chunk = Buffer.alloc(64 * 1024, 'a')
  for (let i = 0; i < CLIENTS; i++) {
    const socket = net.connect(port, '127.0.0.1')
    socket.on('error', () => {})
    socket.on('data', (data) => statuses.push(data.toString('latin1').split(' ')[1]))
    sockets.push(socket)
    socket.write(`POST /form/${i} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`)
    for (let sent = 0; sent < SENT; sent += chunk.length) socket.write(chunk)
    if (i % 50 === 49) await sleep(50)
  }
  await sleep(3000)
  const peak = rss()
  for (const socket of sockets) socket.destroy()
  child.kill('SIGKILL')
  return { budget, clients: CLIENTS, sentMbEach: SENT / 1024 / 1024, rssBeforeMb: Math.round(before), rssHeldMb: Math.round(peak), refused503: statuses.filter((status) => status === '503').length }
}

for (const budget of ['256mb', '0b']) console.log(JSON.stringify(await run(budget)))
