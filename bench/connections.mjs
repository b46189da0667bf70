// How the cost grows with idle keep-alive connections (a measurement, not a test):
//   npm run build && (ulimit -n 65536; node bench/connections.mjs [--sizes 10,1000,10000] [--rate 1000] [--seconds 5] [--floor])
// --floor: the same against a bare node:http server (bench/servers.mjs upstream, same node arguments): node's own cost.
// Starts `portcullis start` (a route to the built-in echo upstream, admin listener on), then for each size:
// opens that many client connections, each sending one request with keep-alive and then staying idle; reads the
// gateway's RSS (/proc) before and after, so RSS per idle connection = the difference / connections; then sends
// requests at a fixed rate (open loop, on 10 connections of their own) and reports their p50/p99 latency, and
// the event-loop delay p99 over that time. The file limit must allow the sockets: `ulimit -n` as a user must raise
// it (docs/deployment.md).
// Both are read through the process's inspector (bench/inspector.mjs), the same way for Portcullis and the floor:
// RSS after a full collection (HeapProfiler.collectGarbage), so that the young generation's garbage, which is bounded
// by its size (`--max-semi-space-size`) and not by the connections, is not counted per connection (the figure without
// the collection is reported beside it); the event-loop delay from a monitorEventLoopDelay of 1 ms resolution
// installed in the process, minus that resolution (node's histogram counts the timer's own interval: an idle
// process reads about the resolution). The admin listener's prom-client gauge, at 10 ms resolution, is reported too.
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { clearInterval, setInterval } from 'node:timers'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import { stringify } from 'yaml'
import { attachInspector } from './inspector.mjs'

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: '10,1000,10000' }, rate: { type: 'string', default: '1000' }, seconds: { type: 'string', default: '5' },
    // The same against a bare node:http server (bench/servers.mjs upstream) with the node arguments Portcullis starts with: node's own floor.
    floor: { type: 'boolean', default: false },
  },
})
const sizes = opts.sizes.split(',').map(Number)
const RATE = Number(opts.rate)
const SECONDS = Number(opts.seconds)
// Below the ephemeral range (32768 and up on Linux), which the idle connections themselves use up.
const PORT = 20000 + Math.floor(Math.random() * 10000)
const ADMIN = PORT + 1

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-connections-'))
const file = path.join(dir, 'portcullis.yaml')
writeFileSync(file, stringify({
  server: { listen: `127.0.0.1:${PORT}`, keep_alive_timeout: '10m' },
  admin: { listen: `127.0.0.1:${ADMIN}` },
  log: { level: 'warn' },
  upstreams: { echo: { url: 'builtin:echo' } },
  routes: [{ id: 'echo', path: '/**', upstream: 'echo', auth: 'none' }],
}))
const NODE_ARGS = ['--max-semi-space-size=64', '--inspect=127.0.0.1:0']
const child = opts.floor
  ? spawn(process.execPath, [...NODE_ARGS, path.join(import.meta.dirname, 'servers.mjs'), 'upstream'], { stdio: ['ignore', 'pipe', 'pipe'] })
  : spawn(process.execPath, [...NODE_ARGS, path.join(import.meta.dirname, '..', 'dist/cli.js'), 'start', '--config', file],
    { stdio: ['ignore', 'ignore', 'pipe'] })
const inspector = await attachInspector(child)
const rssKb = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1])
/** RSS after a full collection (twice: the first can leave what finalizers freed). */
async function collectedRssKb() {
  await inspector.collectGarbage()
  await inspector.collectGarbage()
  await sleep(200)
  return rssKb()
}
/** The process's V8 heap in use and its memory outside the heap that V8 knows of (buffers), in bytes. */
const heapOf = () => inspector.evaluate('(() => { const m = process.memoryUsage(); return { heap: m.heapUsed, external: m.external } })()')
const LOOP_RESOLUTION_MS = 1
await inspector.evaluate(`globalThis.benchLoopDelay = require('node:perf_hooks').monitorEventLoopDelay({ resolution: ${LOOP_RESOLUTION_MS} }); benchLoopDelay.enable(); true`)
/** The event-loop delay's p99 since the last call, in ms, the timer's own interval taken off. */
async function loopDelayP99() {
  const nanoseconds = await inspector.evaluate('(() => { const p = benchLoopDelay.percentile(99); benchLoopDelay.reset(); return p })()')
  return Math.max(0, nanoseconds / 1e6 - LOOP_RESOLUTION_MS)
}
const port = opts.floor ? await new Promise((resolve) => child.stdout.once('data', (chunk) => resolve(JSON.parse(String(chunk)).port))) : PORT
const base = `http://127.0.0.1:${port}`
for (let tries = 0; ; tries++) {
  try {
    const res = await request(`${base}/ready`)
    await res.body.dump()
    break
  } catch { /* not yet */ }
  if (tries > 300) throw new Error('portcullis did not start')
  await sleep(100)
}

/** One connection that sent a keep-alive request, read its answer, and now stays open doing nothing. */
function idleConnection() {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    socket.setEncoding('latin1')
    let text = ''
    socket.on('data', (chunk) => {
      text += chunk
      if (text.includes('\r\n\r\n') && text.includes('}')) resolve(socket)
    })
    socket.on('error', reject)
    socket.on('connect', () => socket.write('GET /idle HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive\r\n\r\n'))
  })
}

async function eventLoopP99() {
  if (opts.floor) return undefined
  const res = await request(`http://127.0.0.1:${ADMIN}/metrics`)
  const text = await res.body.text()
  const found = /^portcullis_nodejs_eventloop_lag_p99_seconds (\S+)/m.exec(text)
  return found ? Number(found[1]) * 1000 : undefined
}

async function fixedRate() {
  const agent = new Agent({ connections: 10 })
  const latencies = []
  const pending = []
  const started = performance.now()
  let sent = 0
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - started) / 1000) * RATE)
    while (sent < due) {
      sent++
      const at = performance.now()
      pending.push(request(`${base}/load`, { dispatcher: agent }).then(async (res) => { await res.body.dump(); latencies.push(performance.now() - at) }))
    }
  }, 1)
  await sleep(SECONDS * 1000)
  clearInterval(timer)
  await Promise.all(pending)
  await agent.close()
  latencies.sort((a, b) => a - b)
  const q = (p) => Number(latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))].toFixed(2))
  return { requests: latencies.length, p50: q(0.5), p99: q(0.99) }
}

const rows = []
let open = []
for (const size of sizes) {
  for (const socket of open) socket.destroy()
  open = []
  await sleep(500)
  const before = await collectedRssKb()
  const heapBefore = await heapOf()
  for (let i = 0; i < size; i += 200) {
    open.push(...await Promise.all(Array.from({ length: Math.min(200, size - i) }, idleConnection)))
  }
  await sleep(1000)
  const uncollected = rssKb()
  const after = await collectedRssKb()
  const heapAfter = await heapOf()
  await eventLoopP99()
  await loopDelayP99()
  const latency = await fixedRate()
  const loopP99 = await loopDelayP99()
  const promP99 = await eventLoopP99()
  const row = {
    connections: size, rssBeforeKb: before, rssAfterKb: after, rssUncollectedKb: uncollected,
    bytesPerIdleConnection: Math.round(((after - before) * 1024) / size), bytesUncollected: Math.round(((uncollected - before) * 1024) / size),
    heapPerConnection: Math.round((heapAfter.heap - heapBefore.heap) / size), externalPerConnection: Math.round((heapAfter.external - heapBefore.external) / size),
    ...latency, eventLoopDelayP99Ms: Number(loopP99.toFixed(2)), promClientLagP99Ms: promP99,
  }
  rows.push(row)
  console.log(JSON.stringify(row))
}
for (const socket of open) socket.destroy()
inspector.close()
child.kill('SIGTERM')
const base10 = rows[0]
console.log('\n| idle connections | RSS per idle connection, collected (not collected) | of it V8 heap | latency p50 / p99 (ms) | p99 ratio | event-loop delay p99 (ms) |')
console.log('|---|---|---|---|---|---|')
for (const row of rows) {
  const kb = (bytes) => `${(bytes / 1024).toFixed(1)} KB`
  console.log(`| ${row.connections.toLocaleString('en')} | ${kb(row.bytesPerIdleConnection)} (${kb(row.bytesUncollected)}) | ${kb(row.heapPerConnection)} | ${row.p50} / ${row.p99} | ${(row.p99 / base10.p99).toFixed(2)}× | ${row.eventLoopDelayP99Ms} |`)
}
process.exit(0)
