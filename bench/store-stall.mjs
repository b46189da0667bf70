// Do the token endpoint's SQLite commits stall the gateway's requests? (a measurement, not a test)
//   npm run build && node bench/store-stall.mjs [--rate 400] [--seconds 12] [--token-connections 8] [--workers N] [--pin] [--against DIR]
// Starts `portcullis start` (this build, or DIR's) with the embedded authorization server on SQLite and an
// `auth: none` route to the built-in echo; sends gateway requests on a fixed schedule (open loop: one every 1/rate
// s, whatever the answers do) for the whole run, and client_credentials grants as fast as `token-connections`
// connections get answers (closed loop) in its middle third. Prints p50/p99/max of the gateway requests sent with
// and without the token load beside them, and the grants/s. --workers N: `server.workers: N`, whose processes
// share the file (and its write lock). --pin: Portcullis on CPU 0, this load generator on CPU 1 (taskset).
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { clearInterval, setInterval } from 'node:timers'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'

const { values: opts } = parseArgs({
  options: {
    rate: { type: 'string', default: '400' }, seconds: { type: 'string', default: '12' }, 'token-connections': { type: 'string', default: '8' },
    workers: { type: 'string' }, against: { type: 'string' }, pin: { type: 'boolean', default: false },
  },
})
const root = path.resolve(opts.against ?? path.join(import.meta.dirname, '..'))
const RATE = Number(opts.rate)
const SECONDS = Number(opts.seconds)
const TOKEN_CONNECTIONS = Number(opts['token-connections'])
const PORT = 20000 + Math.floor(Math.random() * 20000)
const SECRET = 'store-stall-bench-secret-0123456789'

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-store-stall-'))
const file = path.join(dir, 'portcullis.yaml')
writeFileSync(file, `
server: { listen: "127.0.0.1:${PORT}"${opts.workers === undefined ? '' : `, workers: ${opts.workers}`} }
log: { level: warn }
upstreams: { echo: { url: "builtin:echo" } }
routes: [ { id: api, path: "/api/**", upstream: echo, auth: none } ]
authorization_server:
  enabled: true
  issuer: "http://127.0.0.1:${PORT}"
  store: { type: sqlite, path: portcullis.db }
  access_token: { audience: [bench] }
  clients:
    - { client_id: svc, client_secret: "${SECRET}", grant_types: [client_credentials], scopes: [items:read] }
  throttling: { failures_per_client: 1000000, failures_per_ip: 1000000 }
`)
const command = [process.execPath, '--max-semi-space-size=64', path.join(root, 'dist/cli.js'), 'start', '--config', file]
if (opts.pin) {
  execFileSync('taskset', ['-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })
  command.unshift('taskset', '-c', '0')
}
const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] })
const base = `http://127.0.0.1:${PORT}`
const gateway = new Agent({ connections: 64, pipelining: 1 })
const tokens = new Agent({ connections: TOKEN_CONNECTIONS, pipelining: 1 })
for (let tries = 0; ; tries++) {
  try {
    const res = await request(`${base}/api/ready`, { dispatcher: gateway })
    await res.body.dump()
    if (res.statusCode === 200) break
  } catch { /* not listening yet */ }
  if (tries > 600) throw new Error('portcullis did not start')
  await sleep(100)
}

const grantBody = 'grant_type=client_credentials'
const grantHeaders = { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`svc:${SECRET}`).toString('base64')}` }
let grants = 0
let refused = 0
let tokenLoad = false
const grantLoop = async () => {
  while (tokenLoad) {
    const res = await request(`${base}/token`, { dispatcher: tokens, method: 'POST', headers: grantHeaders, body: grantBody })
    await res.body.dump()
    if (res.statusCode === 200) grants++
    else refused++
  }
}

const samples = []
const started = performance.now()
let sent = 0
const inFlight = []
const timer = setInterval(() => {
  const due = Math.floor(((performance.now() - started) / 1000) * RATE)
  while (sent < due) {
    const n = sent++
    const at = performance.now()
    inFlight.push(request(`${base}/api/items/${n}`, { dispatcher: gateway }).then(async (res) => {
      await res.body.dump()
      samples.push({ at, ms: performance.now() - at, status: res.statusCode })
    }, () => samples.push({ at, ms: performance.now() - at, status: 0 })))
  }
}, 1)
await sleep((SECONDS * 1000) / 3)
const loadFrom = performance.now()
tokenLoad = true
const loops = Array.from({ length: TOKEN_CONNECTIONS }, grantLoop)
await sleep((SECONDS * 1000) / 3)
tokenLoad = false
await Promise.all(loops)
const loadTo = performance.now()
await sleep(Math.max(0, SECONDS * 1000 - (performance.now() - started)))
clearInterval(timer)
await Promise.all(inFlight)
child.kill('SIGTERM')
await Promise.all([gateway.close(), tokens.close()])

const stats = (list) => {
  const ms = list.map((sample) => sample.ms).sort((a, b) => a - b)
  const q = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]?.toFixed(2)
  return { requests: ms.length, p50: q(0.5), p99: q(0.99), max: ms.at(-1)?.toFixed(2), failed: list.filter((sample) => sample.status !== 200).length }
}
const loaded = (sample) => sample.at >= loadFrom && sample.at <= loadTo
console.log(JSON.stringify({
  build: root, workers: opts.workers ?? 'none', rate: RATE, tokenConnections: TOKEN_CONNECTIONS,
  grantsPerSecond: Math.round(grants / ((loadTo - loadFrom) / 1000)), refused,
  gatewayAlone: stats(samples.filter((sample) => !loaded(sample))), gatewayBesideGrants: stats(samples.filter(loaded)),
}))
