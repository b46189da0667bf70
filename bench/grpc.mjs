#!/usr/bin/env node
// gRPC and HTTP/2 through Portcullis (a measurement, not a test), in one run, side by side:
//   grpc-direct     unary calls straight to the gRPC service (examples/grpc/service.mjs, @grpc/grpc-js, h2c)
//   grpc            the same calls through Portcullis (h2c in and out), a cached JWT, route scopes, identity metadata
//   grpc-nginx      the same calls through nginx's grpc_pass (no auth): the C reference
//   h1-d            (d): GET /api/items/42 with the cached JWT over HTTP/1.1 (undici Pool), as bench/run.mjs
//   h2c-d           the same request over cleartext HTTP/2 (undici, prior knowledge, many streams a connection)
// Each rep measures every row for `duration` seconds (order rotated each rep) against the same processes, after a
// warm-up. The process under test is pinned to CPU 0 (Portcullis, or nginx, or the service for grpc-direct), the
// load generator (this process) and the service to CPU 1, when taskset exists. CPU µs per call is the process
// under test's utime+stime over the measured seconds, divided by the calls answered; for `grpc`, Portcullis's alone.
//
//   npm run build && node bench/grpc.mjs [--reps 3] [--duration 5] [--warmup 2] [--concurrency 50] [--rows grpc,h2c-d]
//                                        [--profile DIR]   (Portcullis writes a V8 CPU profile into DIR on exit)
import { execFileSync } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { Client, Pool } from 'undici'
import { cpuMicros } from './cpu.mjs'
import { grpcNginxConfig, NGINX } from './nginx.mjs'
import { freePort, median, root, sleep, start, startBench } from './rows.mjs'
import { AUDIENCE, ISSUER } from './tokens.mjs'

const { values: options } = parseArgs({ options: {
  reps: { type: 'string', default: '3' }, duration: { type: 'string', default: '5' }, warmup: { type: 'string', default: '2' },
  concurrency: { type: 'string', default: '50' }, rows: { type: 'string' }, profile: { type: 'string' },
} })
const reps = Number(options.reps)
const durationMs = Number(options.duration) * 1000
const warmupMs = Number(options.warmup) * 1000
const concurrency = Number(options.concurrency)

const hasTaskset = (() => { try { execFileSync('taskset', ['-c', '0', 'true']); return true } catch { return false } })()
const onCpu = (cpu) => (hasTaskset ? ['taskset', '-c', String(cpu)] : [])
// This process generates the load: on CPU 1 with the upstreams.
if (hasTaskset) execFileSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' })

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-grpc-bench-'))
const bench = await startBench(dir, onCpu(1))

const service = start([...onCpu(1), process.execPath, 'examples/grpc/service.mjs', '127.0.0.1:0'])
const servicePort = await (async () => {
  for (let i = 0; i < 1000; i++) {
    const found = service.out().match(/on 127\.0\.0\.1:(\d+)/)
    if (found) return Number(found[1])
    await sleep(10)
  }
  throw new Error(`the gRPC service did not start: ${service.err()}`)
})()

const port = await freePort()
// A directory of its own: Portcullis watches its config file's directory, and nothing else may write there.
const configFile = path.join(mkdtempSync(path.join(dir, 'config-')), 'portcullis.yaml')
writeFileSync(configFile, `server: { listen: "127.0.0.1:${port}", http2: { cleartext: true } }
upstreams:
  items: { url: "${bench.upstreamUrl}" }
  echo: { url: "http://127.0.0.1:${servicePort}", http2: true }
issuers:
  - { issuer: "${ISSUER}", jwks_file: "${bench.jwksFile}", audience: [${AUDIENCE}], algorithms: [ES256] }
routes:
  - { id: items, path: "/api/**", upstream: items, scopes: { all: ["items:read"] } }
  - { id: echo, path: "/portcullis.test.Echo/*", upstream: echo, scopes: { all: ["items:read"] } }
forward: { identity_headers: { subject: X-Auth-Subject, client_id: X-Auth-Client-Id, scopes: X-Auth-Scopes, issuer: X-Auth-Issuer } }
log: { level: warn }
`)
const profiling = options.profile ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(options.profile)] : []
const portcullis = start([...onCpu(0), process.execPath, '--max-semi-space-size=64', ...profiling, path.join(root, 'dist/cli.js'), 'start', '--config', configFile])
for (let i = 0; ; i++) {
  const up = await fetch(`http://127.0.0.1:${port}/api/items/42`, { headers: { authorization: `Bearer ${bench.token}` } }).then((res) => res.status === 200, () => false)
  if (up) break
  if (i > 300) throw new Error(`Portcullis did not start: ${portcullis.err().slice(-500)}`)
  await sleep(100)
}

let nginx
let nginxPort
if (NGINX !== undefined) {
  nginxPort = await freePort()
  const nginxDir = path.join(dir, 'nginx')
  const file = grpcNginxConfig(nginxDir, { port: nginxPort, upstream: `127.0.0.1:${servicePort}` })
  nginx = start([...onCpu(0), NGINX, '-c', file, '-p', nginxDir])
  await sleep(500)
}

const proto = path.join(root, 'examples/grpc/echo.proto')
const { Echo } = grpc.loadPackageDefinition(protoLoader.loadSync(proto, { keepCase: true })).portcullis.test
const metadata = new grpc.Metadata()
metadata.set('authorization', `Bearer ${bench.token}`)

/** Closed-loop unary calls at `address` for `ms`: the number answered OK. */
function grpcLoad(address) {
  const client = new Echo(address, grpc.credentials.createInsecure())
  return {
    async run(ms) {
      const end = performance.now() + ms
      let ok = 0
      let failed = 0
      let first
      await Promise.all(Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) {
          await new Promise((resolve) => client.Unary({ text: 'hi' }, metadata, (error) => { if (error) { failed++; first ??= error } else ok++; resolve() }))
        }
      }))
      if (failed > 0) throw new Error(`${failed} of ${ok + failed} calls to ${address} failed: ${first?.message}`)
      return ok
    },
    close: () => client.close(),
  }
}

/** Closed-loop GET /api/items/42 on `dispatcher` for `ms`: the number answered 200. */
function httpLoad(dispatcher) {
  return {
    async run(ms) {
      const end = performance.now() + ms
      let ok = 0
      await Promise.all(Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) {
          const res = await dispatcher.request({ path: '/api/items/42', method: 'GET', headers: { authorization: `Bearer ${bench.token}` } })
          await res.body.text()
          if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`)
          ok++
        }
      }))
      return ok
    },
    close: () => dispatcher.close(),
  }
}

const base = `http://127.0.0.1:${port}`
const allRows = [
  { id: 'grpc-direct', pid: service.proc.pid, loader: grpcLoad(`127.0.0.1:${servicePort}`) },
  { id: 'grpc', pid: portcullis.proc.pid, loader: grpcLoad(`127.0.0.1:${port}`) },
  ...(nginx ? [{ id: 'grpc-nginx', pid: nginx.proc.pid, loader: grpcLoad(`127.0.0.1:${nginxPort}`) }] : []),
  { id: 'h1-d', pid: portcullis.proc.pid, loader: httpLoad(new Pool(base, { connections: concurrency })) },
  { id: 'h2c-d', pid: portcullis.proc.pid, loader: httpLoad(new Client(base, { allowH2: true, useH2c: true, pipelining: 100 })) },
]
const rows = options.rows ? allRows.filter((row) => options.rows.split(',').includes(row.id)) : allRows

for (const row of rows) await row.loader.run(warmupMs)
const results = Object.fromEntries(rows.map((row) => [row.id, []]))
for (let rep = 0; rep < reps; rep++) {
  for (let k = 0; k < rows.length; k++) {
    const row = rows[(k + rep) % rows.length]
    const cpu = cpuMicros(row.pid)
    const began = performance.now()
    const calls = await row.loader.run(durationMs)
    const seconds = (performance.now() - began) / 1000
    results[row.id].push({ perSecond: calls / seconds, cpuMicrosPerCall: (cpuMicros(row.pid) - cpu) / calls })
  }
}
for (const row of allRows) row.loader.close()
portcullis.proc.kill('SIGTERM')
service.proc.kill('SIGTERM')
nginx?.proc.kill('SIGTERM')
bench.upstream.proc.kill('SIGTERM')

const summary = Object.fromEntries(Object.entries(results).map(([id, list]) => [id, {
  perSecond: Math.round(median(list.map((r) => r.perSecond))),
  cpuMicrosPerCall: Math.round(median(list.map((r) => r.cpuMicrosPerCall)) * 10) / 10,
}]))
console.log('| row | calls/s | CPU µs per call (process under test) |')
console.log('|---|---|---|')
for (const [id, { perSecond, cpuMicrosPerCall }] of Object.entries(summary)) console.log(`| ${id} | ${perSecond} | ${cpuMicrosPerCall} |`)
const ratio = (a, b, key) => (summary[a] && summary[b] ? (summary[a][key] / summary[b][key]).toFixed(2) : 'n/a')
if (summary.grpc && summary['grpc-direct']) console.log(`\ngrpc over grpc-direct: ${ratio('grpc', 'grpc-direct', 'perSecond')}× calls/s; Portcullis ${summary.grpc.cpuMicrosPerCall} µs per call`)
if (summary['grpc-nginx'] && summary.grpc) console.log(`grpc over grpc-nginx: ${ratio('grpc', 'grpc-nginx', 'perSecond')}× calls/s, ${ratio('grpc', 'grpc-nginx', 'cpuMicrosPerCall')}× CPU per call`)
if (summary['h2c-d'] && summary['h1-d']) console.log(`h2c-d over h1-d, CPU per request: ${ratio('h2c-d', 'h1-d', 'cpuMicrosPerCall')}× (${(summary['h2c-d'].cpuMicrosPerCall - summary['h1-d'].cpuMicrosPerCall).toFixed(1)} µs)`)
console.log(JSON.stringify({ date: new Date().toISOString(), reps, durationMs, concurrency, pinned: hasTaskset, results, summary }))
