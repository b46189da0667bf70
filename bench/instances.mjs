#!/usr/bin/env node
// Scale-out measurement (not a test): gateway requests/s with one Portcullis instance beside two instances
// sharing one Redis, interleaved (one, two, one, two, …). Every request carries a JWT access token of the
// embedded server (a verified-token cache hit, a scope check, identity headers) to the built-in echo API.
// With two instances the load is split evenly (half the connections each), as a round-robin balancer would.
//
//   npm run build && node bench/instances.mjs [--duration 10] [--reps 3] [--connections 50]
//
// Each instance is pinned to its own CPU when taskset exists; the load generator shares them (a 2-core
// machine has no third). Redis: REDIS_URL (default redis://127.0.0.1:6379), under a prefix of its own,
// deleted afterwards. Results go to bench/results/instances-<date>.json and a Markdown table on stdout.
import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values } = parseArgs({
  options: { duration: { type: 'string', default: '10' }, reps: { type: 'string', default: '3' }, connections: { type: 'string', default: '50' } },
})
const DURATION = Number(values.duration)
const REPS = Number(values.reps)
const CONNECTIONS = Number(values.connections)
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const PREFIX = `{portcullis-bench-${process.pid}}:`
const PORTS = [18610, 18611]
const ISSUER = `http://127.0.0.1:${PORTS[0]}`
const SECRET = 'bench-secret-0123456789'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const hasTaskset = spawnSync('taskset', ['-c', '0', 'true']).status === 0

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-instances-'))
for (const port of PORTS) {
  writeFileSync(path.join(dir, `${port}.yaml`), `
server: { listen: "127.0.0.1:${port}" }
upstreams: { echo: { url: "builtin:echo" } }
routes: [ { id: api, path: "/api/**", upstream: echo, scopes: { all: [items:read] } } ]
forward: { identity_headers: { subject: X-Auth-Subject, scopes: X-Auth-Scopes } }
authorization_server:
  enabled: true
  issuer: "${ISSUER}"
  store: { type: redis, url: "${REDIS_URL}", prefix: "${PREFIX}" }
  access_token: { audience: [bench] }
  clients:
    - { client_id: svc, client_secret: "${SECRET}", grant_types: [client_credentials], scopes: [items:read] }
audit: { output: "${path.join(dir, 'audit.log')}" }
log: { level: warn }
`)
}

async function startInstance(port, cpu) {
  const cli = [process.execPath, path.join(root, 'dist/cli.js'), 'start', '--config', path.join(dir, `${port}.yaml`)]
  const [cmd, args] = hasTaskset ? ['taskset', ['-c', String(cpu), ...cli]] : [cli[0], cli.slice(1)]
  const server = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'inherit'] })
  const reap = () => server.kill('SIGKILL')
  process.once('exit', reap)
  for (let waited = 0; !(await fetch(`http://127.0.0.1:${port}/jwks`).then((res) => res.ok, () => false)); waited += 100) {
    if (waited > 15_000) throw new Error(`instance on ${port} did not start`)
    await sleep(100)
  }
  return async () => { server.kill(); process.off('exit', reap); await sleep(300) }
}

async function token() {
  const res = await fetch(`${ISSUER}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: 'Basic ' + Buffer.from(`svc:${SECRET}`).toString('base64') },
    body: 'grant_type=client_credentials',
  })
  if (res.status !== 200) throw new Error(`token: ${res.status}`)
  return (await res.json()).access_token
}

async function run(instances) {
  const stops = [await startInstance(PORTS[0], 0)]
  if (instances === 2) stops.push(await startInstance(PORTS[1], 1))
  const headers = { authorization: `Bearer ${await token()}` }
  const ports = PORTS.slice(0, instances)
  // Warm every instance's cache, then measure.
  for (const port of ports) await fetch(`http://127.0.0.1:${port}/api/items`, { headers })
  const results = await Promise.all(ports.map((port) => autocannon({
    url: `http://127.0.0.1:${port}/api/items`, headers, connections: Math.round(CONNECTIONS / instances), duration: DURATION,
  })))
  for (const stop of stops) await stop()
  return {
    rps: results.reduce((sum, r) => sum + r.requests.average, 0),
    p50: Math.max(...results.map((r) => r.latency.p50)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
  }
}

const results = { 'one instance': [], 'two instances, one Redis': [] }
for (let rep = 0; rep < REPS; rep++) {
  results['one instance'].push(await run(1))
  results['two instances, one Redis'].push(await run(2))
}
const redis = new Redis(REDIS_URL)
const keys = await redis.keys(`${PREFIX}*`)
for (let i = 0; i < keys.length; i += 1000) await redis.del(...keys.slice(i, i + 1000))
await redis.quit()
const summary = Object.fromEntries(Object.entries(results).map(([name, runs]) => [name, {
  rps: Math.round(median(runs.map((r) => r.rps))), p50: median(runs.map((r) => r.p50)), p99: median(runs.map((r) => r.p99)),
  non2xx: runs.reduce((sum, r) => sum + r.non2xx, 0),
}]))
mkdirSync(path.join(root, 'bench/results'), { recursive: true })
const out = path.join(root, `bench/results/instances-${new Date().toISOString().slice(0, 10)}.json`)
writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), node: process.version, pinned: hasTaskset, connections: CONNECTIONS, results, summary }, null, 2))
console.log(`\n| JWT cache hit → echo, ${CONNECTIONS} connections, ${REPS}×${DURATION}s | requests/s (median) | p50 ms | p99 ms | non-2xx |\n|---|---|---|---|---|`)
for (const [name, s] of Object.entries(summary)) console.log(`| ${name} | ${s.rps} | ${s.p50} | ${s.p99} | ${s.non2xx} |`)
console.log(`\n(${out})`)
