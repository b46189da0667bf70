#!/usr/bin/env node
// Caches issue measurement (not a test): memory per cached verified JWT and per introspection answer with
// 100 000 entries, and requests/s on a verified-JWT cache hit vs a miss (verification on every request).
//
//   npm run build && node --expose-gc bench/cache.mjs [--entries 100000] [--duration 10] [--reps 3]
//
// Everything runs on 127.0.0.1. The gateway under load is a separate `portcullis start` process, pinned
// to CPU 0 when taskset exists (the load generator and upstream share CPU 1). Results go to
// bench/results/cache-<date>.json and a Markdown table on stdout.
import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values } = parseArgs({
  options: {
    entries: { type: 'string', default: '100000' },
    duration: { type: 'string', default: '10' },
    reps: { type: 'string', default: '3' },
  },
})
const ENTRIES = Number(values.entries)
const DURATION = Number(values.duration)
const REPS = Number(values.reps)
const ISSUER = 'https://bench.portcullis.invalid/'
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const hasTaskset = spawnSync('taskset', ['-c', '0', 'true']).status === 0
const pinned = (cpu, cmd) => (hasTaskset ? ['taskset', ['-c', String(cpu), ...cmd]] : [cmd[0], cmd.slice(1)])

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-'))
const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true })
writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'bench', alg: 'ES256' }] }))
const mint = (sub) => new SignJWT({ scope: 'items:read', client_id: 'bench-client', jti: `jti-${sub}` })
  .setProtectedHeader({ alg: 'ES256', kid: 'bench', typ: 'at+jwt' })
  .setIssuer(ISSUER).setAudience('bench').setSubject(sub).setIssuedAt().setExpirationTime('2h').sign(privateKey)

// ---- memory: N entries in each cache, in this process, after a forced GC --------------------------------
async function memory() {
  if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc')
  const { Authenticator } = await import(path.join(root, 'dist/authn/authenticator.js'))
  const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {}, fatal() {}, child() { return silent }, level: 'silent', silent() {} }
  const introspection = http.createServer((req, res) => {
    let body = ''
    req.on('data', (chunk) => { body += chunk })
    req.on('end', () => {
      const token = new URLSearchParams(body).get('token')
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ active: true, sub: `user-${token.slice(-8)}`, client_id: 'bench-client', scope: 'items:read', exp: Math.floor(Date.now() / 1000) + 7200, iss: 'https://opaque.portcullis.invalid/' }))
    })
  })
  await new Promise((resolve) => introspection.listen(0, '127.0.0.1', resolve))
  const authenticator = new Authenticator({
    issuers: [
      { issuer: ISSUER, jwks_file: path.join(dir, 'jwks.json'), audience: ['bench'], algorithms: ['ES256'] },
      { issuer: 'https://opaque.portcullis.invalid/', audience: ['bench'], introspection: {
        endpoint: `http://127.0.0.1:${introspection.address().port}/`, client_id: 'gw', client_secret: 'secret', cache_ttl: '1h' } },
    ],
    cache: { max_entries: ENTRIES },
    log: silent,
    now: Date.now,
  })
  const measure = () => { globalThis.gc(); globalThis.gc(); const m = process.memoryUsage(); return { heap: m.heapUsed, rss: m.rss } }
  const tokens = []
  for (let i = 0; i < ENTRIES; i++) tokens.push(await mint(`user-${i}`))
  const before = measure()
  for (let i = 0; i < ENTRIES; i += 256) await Promise.all(tokens.slice(i, i + 256).map((token) => authenticator.authenticate(token)))
  const afterJwt = measure()
  tokens.length = 0
  const opaque = Array.from({ length: ENTRIES }, (_, i) => `opaque-${String(i).padStart(8, '0')}-${'x'.repeat(24)}`)
  const beforeOpaque = measure()
  for (let i = 0; i < ENTRIES; i += 64) await Promise.all(opaque.slice(i, i + 64).map((token) => authenticator.authenticate(token)))
  const afterOpaque = measure()
  const stats = authenticator.cacheStats()
  await authenticator.close()
  introspection.close()
  return {
    entries: ENTRIES,
    jwtCacheSize: stats.find((s) => s.name === 'jwt').size,
    introspectionCacheSize: stats.find((s) => s.name === 'introspection').size,
    jwtHeapBytesPerEntry: Math.round((afterJwt.heap - before.heap) / ENTRIES),
    jwtRssBytesPerEntry: Math.round((afterJwt.rss - before.rss) / ENTRIES),
    introspectionHeapBytesPerEntry: Math.round((afterOpaque.heap - beforeOpaque.heap) / ENTRIES),
    introspectionRssBytesPerEntry: Math.round((afterOpaque.rss - beforeOpaque.rss) / ENTRIES),
  }
}

// ---- load: the same token on every request, with the verified-JWT cache on (hit) and off (miss) ---------
function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 1e6 / 100
}

async function load() {
  const body = JSON.stringify({ id: 42, name: 'item', padding: 'x'.repeat(60) })
  const [upCmd, upArgs] = pinned(1, [process.execPath, '-e', `require('http').createServer((q,s)=>{s.writeHead(200,{'content-type':'application/json','content-length':${Buffer.byteLength(body)}});s.end(${JSON.stringify(body)})}).listen(18500,'127.0.0.1')`])
  const upstream = spawn(upCmd, upArgs, { stdio: 'inherit' })
  const token = await mint('load-user')
  const config = (jwtCache) => `
server: { listen: "127.0.0.1:18501" }
upstreams: { items: { url: "http://127.0.0.1:18500" } }
issuers:
  - { issuer: "${ISSUER}", jwks_file: jwks.json, audience: [bench], algorithms: [ES256] }
routes:
  - { id: items, path: "/api/**", upstream: items, scopes: { all: ["items:read"] } }
cache: { jwt: ${jwtCache} }
log: { level: warn }
`
  writeFileSync(path.join(dir, 'hit.yaml'), config(true))
  writeFileSync(path.join(dir, 'miss.yaml'), config(false))
  const results = { hit: [], miss: [] }
  await sleep(300)
  for (let rep = 0; rep < REPS; rep++) {
    for (const scenario of ['hit', 'miss']) {
      const [cmd, args] = pinned(0, [process.execPath, path.join(root, 'dist/cli.js'), 'start', '--config', path.join(dir, `${scenario}.yaml`)])
      const gateway = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'inherit'] })
      await sleep(1000)
      const url = 'http://127.0.0.1:18501/api/items/42'
      const gate = await fetch(url, { headers: { authorization: `Bearer ${token}` } })
      if (gate.status !== 200) throw new Error(`${scenario}: correctness gate got ${gate.status}`)
      const denied = await fetch(url)
      if (denied.status !== 401) throw new Error(`${scenario}: correctness gate without token got ${denied.status}`)
      await autocannon({ url, connections: 50, duration: 2, headers: { authorization: `Bearer ${token}` } })
      const cpuBefore = cpuMicros(gateway.pid)
      const run = await autocannon({ url, connections: 50, duration: DURATION, headers: { authorization: `Bearer ${token}` } })
      const cpu = (cpuMicros(gateway.pid) - cpuBefore) / run.requests.total
      results[scenario].push({ rps: run.requests.average, p50: run.latency.p50, p99: run.latency.p99, cpuMicrosPerRequest: cpu, non2xx: run.non2xx, errors: run.errors })
      gateway.kill()
      await sleep(300)
    }
  }
  upstream.kill()
  return results
}

const memoryResult = await memory()
const loadResult = await load()
const summary = Object.fromEntries(Object.entries(loadResult).map(([name, runs]) => [name, {
  rps: Math.round(median(runs.map((r) => r.rps))),
  p50: median(runs.map((r) => r.p50)),
  p99: median(runs.map((r) => r.p99)),
  cpuMicrosPerRequest: Number(median(runs.map((r) => r.cpuMicrosPerRequest)).toFixed(1)),
  non2xx: runs.reduce((sum, r) => sum + r.non2xx, 0),
}]))
const pairedRatio = median(loadResult.hit.map((run, i) => run.rps / loadResult.miss[i].rps))
mkdirSync(path.join(root, 'bench/results'), { recursive: true })
const out = path.join(root, `bench/results/cache-${new Date().toISOString().slice(0, 10)}.json`)
writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), node: process.version, pinned: hasTaskset, memory: memoryResult, load: loadResult, summary, pairedRatio }, null, 2))

console.log(`\n| cache | entries | heap B/entry | RSS B/entry |\n|---|---|---|---|`)
console.log(`| verified JWT | ${memoryResult.jwtCacheSize} | ${memoryResult.jwtHeapBytesPerEntry} | ${memoryResult.jwtRssBytesPerEntry} |`)
console.log(`| introspection | ${memoryResult.introspectionCacheSize} | ${memoryResult.introspectionHeapBytesPerEntry} | ${memoryResult.introspectionRssBytesPerEntry} |`)
console.log(`\n| ES256 JWT, 50 connections, ${REPS}×${DURATION}s | req/s (median) | p50 ms | p99 ms | gateway CPU µs/req | non-2xx |\n|---|---|---|---|---|---|`)
for (const [name, s] of Object.entries(summary)) console.log(`| cache ${name} | ${s.rps} | ${s.p50} | ${s.p99} | ${s.cpuMicrosPerRequest} | ${s.non2xx} |`)
console.log(`\nhit / miss, paired median over ${REPS} reps: ${pairedRatio.toFixed(2)}×   (${out})`)
