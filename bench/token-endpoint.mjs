#!/usr/bin/env node
// Embedded authorization server measurement (not a test): client_credentials grants/s and refresh grants/s
// on the SQLite store (WAL, synchronous=FULL) and on Redis side by side, through the real `portcullis start`
// process on 127.0.0.1, interleaved (sqlite, redis, sqlite, redis, …).
//
//   npm run build && node bench/token-endpoint.mjs [--duration 10] [--reps 3] [--connections 20] [--stores sqlite,redis]
//
// Redis: REDIS_URL (default redis://127.0.0.1:6379), under a prefix of its own, deleted afterwards.
//
// Refresh: every connection holds its own refresh token and presents the one the previous response
// rotated in, so each request is a real rotation (consume + two inserts). Results go to
// bench/results/token-endpoint-<date>.json and a Markdown table on stdout.
import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '10' }, reps: { type: 'string', default: '3' }, connections: { type: 'string', default: '20' },
    stores: { type: 'string', default: 'sqlite,redis' },
  },
})
const STORES = values.stores.split(',')
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const REDIS_PREFIX = `{portcullis-bench-${process.pid}}:`
const DURATION = Number(values.duration)
const REPS = Number(values.reps)
const CONNECTIONS = Number(values.connections)
const PORT = 18510
const ISSUER = `http://127.0.0.1:${PORT}`
const SECRET = 'bench-secret-0123456789'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const hasTaskset = spawnSync('taskset', ['-c', '0', 'true']).status === 0

function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 1e6 / 100
}

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-as-'))
const STORE_CONFIG = {
  sqlite: 'store: { type: sqlite, path: portcullis.db }',
  redis: `store: { type: redis, url: "${REDIS_URL}", prefix: "${REDIS_PREFIX}" }`,
}
for (const store of STORES) writeFileSync(path.join(dir, `${store}.yaml`), `
server: { listen: "127.0.0.1:${PORT}" }
upstreams: { echo: { url: "builtin:echo" } }
routes: [ { id: api, path: "/api/**", upstream: echo } ]
authorization_server:
  enabled: true
  issuer: "${ISSUER}"
  ${STORE_CONFIG[store]}
  access_token: { audience: [bench] }
  clients:
    - { client_id: svc, client_secret: "${SECRET}", grant_types: [client_credentials], scopes: [items:read] }
    - { client_id: app, client_secret: "${SECRET}", token_endpoint_auth_method: client_secret_post, first_party: true,
        grant_types: [password, refresh_token], scopes: [items:read] }
  users: [ { username: bench, password: "bench-password" } ]
  throttling: { failures_per_client: 1000000, failures_per_ip: 1000000 }
log: { level: warn }
`)

const form = (fields) => new URLSearchParams(fields).toString()
const basic = 'Basic ' + Buffer.from(`svc:${SECRET}`).toString('base64')

async function passwordLogin() {
  const res = await fetch(`${ISSUER}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: form({ grant_type: 'password', username: 'bench', password: 'bench-password', client_id: 'app', client_secret: SECRET }),
  })
  if (res.status !== 200) throw new Error(`password grant: ${res.status}`)
  return (await res.json()).refresh_token
}

async function run(store, scenario) {
  const cli = [process.execPath, path.join(root, 'dist/cli.js'), 'start', '--config', path.join(dir, `${store}.yaml`)]
  const [cmd, args] = hasTaskset ? ['taskset', ['-c', '0', ...cli]] : [cli[0], cli.slice(1)]
  const server = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'inherit'] })
  // Never leave a server behind (it would hold the port for the next run).
  const reap = () => server.kill('SIGKILL')
  process.once('exit', reap)
  // Ready when it answers (the store opens and the keys load first).
  for (let waited = 0; !(await fetch(`${ISSUER}/jwks`).then((res) => res.ok, () => false)); waited += 100) {
    if (waited > 15_000) throw new Error(`the server on the ${store} store did not start`)
    await sleep(100)
  }
  let options
  if (scenario === 'client_credentials') {
    options = {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic },
      body: form({ grant_type: 'client_credentials' }),
    }
    const gate = await fetch(`${ISSUER}/token`, options)
    if (gate.status !== 200) throw new Error(`client_credentials gate: ${gate.status}`)
  } else {
    // A queue of live refresh tokens: each request takes one, its response puts the rotated one back.
    // (autocannon resets a connection's context after every request of a one-request list.)
    const queue = await Promise.all(Array.from({ length: CONNECTIONS * 2 }, passwordLogin))
    options = {
      requests: [{
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        setupRequest: (request) => {
          const refreshToken = queue.shift()
          if (refreshToken === undefined) throw new Error('refresh token queue ran dry')
          return { ...request, body: form({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: 'app', client_secret: SECRET }) }
        },
        onResponse: (status, body) => {
          if (status === 200) queue.push(JSON.parse(body).refresh_token)
        },
      }],
    }
  }
  const cpuBefore = cpuMicros(server.pid)
  const result = await autocannon({ url: `${ISSUER}/token`, connections: CONNECTIONS, duration: DURATION, ...options })
  const cpu = (cpuMicros(server.pid) - cpuBefore) / Math.max(1, result.requests.total)
  server.kill()
  process.off('exit', reap)
  await sleep(500)
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, cpuMicrosPerRequest: cpu, non2xx: result.non2xx, errors: result.errors }
}

const SCENARIOS = ['client_credentials', 'refresh_token']
const results = Object.fromEntries(STORES.flatMap((store) => SCENARIOS.map((scenario) => [`${scenario} on ${store}`, []])))
for (let rep = 0; rep < REPS; rep++) {
  for (const scenario of SCENARIOS) for (const store of STORES) results[`${scenario} on ${store}`].push(await run(store, scenario))
}
if (STORES.includes('redis')) {
  const { Redis } = await import('ioredis')
  const redis = new Redis(REDIS_URL)
  const keys = await redis.keys(`${REDIS_PREFIX}*`)
  for (let i = 0; i < keys.length; i += 1000) await redis.del(...keys.slice(i, i + 1000))
  await redis.quit()
}
const summary = Object.fromEntries(Object.entries(results).map(([name, runs]) => [name, {
  rps: Math.round(median(runs.map((r) => r.rps))),
  p50: median(runs.map((r) => r.p50)),
  p99: median(runs.map((r) => r.p99)),
  cpuMicrosPerRequest: Number(median(runs.map((r) => r.cpuMicrosPerRequest)).toFixed(0)),
  non2xx: runs.reduce((sum, r) => sum + r.non2xx, 0),
}]))
mkdirSync(path.join(root, 'bench/results'), { recursive: true })
const out = path.join(root, `bench/results/token-endpoint-${new Date().toISOString().slice(0, 10)}.json`)
writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), node: process.version, pinned: hasTaskset, connections: CONNECTIONS, results, summary }, null, 2))
console.log(`\n| grant, ${CONNECTIONS} connections, ${REPS}×${DURATION}s | grants/s (median) | p50 ms | p99 ms | server CPU µs/grant | non-2xx |\n|---|---|---|---|---|---|`)
for (const [name, s] of Object.entries(summary)) console.log(`| ${name} | ${s.rps} | ${s.p50} | ${s.p99} | ${s.cpuMicrosPerRequest} | ${s.non2xx} |`)
console.log(`\n(${out})`)
