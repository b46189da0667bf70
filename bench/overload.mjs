// Behaviour under overload (a measurement, not a test):
//   npm run build && node bench/overload.mjs [--levels 1,1.5,2] [--seconds 8] [--connections 32] [--server 'admission: { max_in_flight: 0 }']
// Row (d) (bench/run.mjs's cache-hit JWT route) pinned to CPU 0 (`taskset -c 0`); the upstream and this client run on
// CPU 1, so what is measured is one Portcullis core. First its capacity: requests answered 200 per CPU-second of
// Portcullis, under 5 s of closed-loop load; then, open loop, each level × capacity for --seconds, each followed by 3 s at 0.25× capacity
// to see how fast it comes back. The client sends on a schedule and never waits: requests are written, pipelined
// (HTTP/1.1 §9.3.2), on --connections keep-alive connections round robin, each at its due time whatever is still
// unanswered, and each latency runs from that due time to its answer (no coordinated omission). Reported per level:
// goodput (200s per second) and its share of capacity, 503s per second, other answers, p50/p99/max latency of the
// 200s and of the 503s, Portcullis's largest RSS, and after the drop the time until a 250 ms window's p99 is under
// 50 ms again with no 503 in it. Last, what one shed request costs: the row with max_in_flight 1 under closed-loop
// load, where nearly every answer is a 503, Portcullis's CPU per answer. `--server` adds flow-map entries to the row's `server:` (e.g. the admission limit).
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { clearInterval, setInterval } from 'node:timers'
import { parseArgs } from 'node:util'
import { Pool } from 'undici'
import { load, root, sleep, startBench, startRow } from './rows.mjs'

const { values: opts } = parseArgs({
  options: {
    levels: { type: 'string', default: '1,1.5,2' },
    seconds: { type: 'string', default: '8' },
    connections: { type: 'string', default: '32' },
    server: { type: 'string', default: '' },
    build: { type: 'string', default: root },
  },
})
const LEVELS = opts.levels.split(',').map(Number)
const SECONDS = Number(opts.seconds)
const CONNECTIONS = Number(opts.connections)
const RECOVERY_MS = 3000
const WINDOW_MS = 250

// This client on CPU 1, beside the upstream.
spawnSync('taskset', ['-cp', '1', String(process.pid)])
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-overload-'))
const bench = await startBench(dir, ['taskset', '-c', '1'])
const row = await startRow(bench, 'd', opts.build, { prefix: ['taskset', '-c', '0'], extraConfig: { server: opts.server } })
const pid = row.proc.proc.pid
const rssKb = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1])
const { port } = new URL(row.base)
/** CPU seconds a process has used (user + system), from /proc. */
const cpuOf = (of) => {
  const fields = readFileSync(`/proc/${of}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}
/** The share of one CPU that Portcullis, the upstream and this client used while `run` ran. */
async function busy(run) {
  const upstreamPid = bench.upstream.proc.pid
  const before = [cpuOf(pid), cpuOf(upstreamPid), process.cpuUsage()]
  const started = performance.now()
  const result = await run()
  const seconds = (performance.now() - started) / 1000
  const own = process.cpuUsage(before[2])
  const cpu = {
    portcullis: Number(((cpuOf(pid) - before[0]) / seconds).toFixed(2)),
    upstream: Number(((cpuOf(upstreamPid) - before[1]) / seconds).toFixed(2)),
    client: Number(((own.user + own.system) / 1e6 / seconds).toFixed(2)),
  }
  return { result, cpu }
}

/**
 * One keep-alive connection of the open-loop client: `send(at)` writes a request due at `at` without waiting; each
 * answer (status line, headers, Content-Length or chunked body) is matched to the oldest unanswered request.
 */
class Connection {
  constructor(onAnswer) {
    this.onAnswer = onAnswer
    this.due = []
    this.buffer = ''
    this.pending = ''
    this.socket = net.connect({ port: Number(port), host: '127.0.0.1' })
    this.socket.setNoDelay(true)
    this.socket.setEncoding('latin1')
    this.socket.on('data', (chunk) => this.read(chunk))
    this.socket.on('error', () => {})
    this.socket.on('close', () => { this.closed = true })
  }

  queue(at) {
    this.due.push(at)
    this.pending += REQUEST
  }

  flush() {
    if (this.pending === '' || this.closed) return
    this.socket.write(this.pending, 'latin1')
    this.pending = ''
  }

  read(chunk) {
    this.buffer += chunk
    for (;;) {
      const head = this.buffer.indexOf('\r\n\r\n')
      if (head === -1) return
      const status = Number(this.buffer.slice(9, 12))
      const headers = this.buffer.slice(0, head).toLowerCase()
      let end
      const length = /\r\ncontent-length: *(\d+)/.exec(headers)
      if (length) end = head + 4 + Number(length[1])
      else if (headers.includes('transfer-encoding: chunked')) {
        const last = this.buffer.indexOf('\r\n0\r\n\r\n', head)
        end = last === -1 ? Infinity : last + 7
      } else end = head + 4
      if (this.buffer.length < end) return
      this.buffer = this.buffer.slice(end)
      this.onAnswer(status, this.due.shift())
    }
  }
}

const REQUEST = `GET /api/items/42 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${bench.token}\r\n\r\n`

/** Latencies and counts of answers by the window (WINDOW_MS) they arrived in, from `start`. */
function recorder(start) {
  const windows = []
  return {
    windows,
    answer(status, at) {
      const now = performance.now()
      const index = Math.floor((now - start) / WINDOW_MS)
      const window = windows[index] ??= { ok: [], shed: [], other: 0 }
      if (status === 200) window.ok.push(now - at)
      else if (status === 503) window.shed.push(now - at)
      else window.other++
    },
  }
}

/** Sends at `rate` per second for `ms`, on the schedule (a 2 ms timer writes whatever came due since, one write a connection). */
async function offer(conns, rate, ms) {
  const start = performance.now()
  let sent = 0
  let next = 0
  await new Promise((resolve) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - start
      const due = Math.floor((Math.min(elapsed, ms) / 1000) * rate)
      while (sent < due) {
        conns[next].queue(start + (sent * 1000) / rate)
        next = (next + 1) % conns.length
        sent++
      }
      for (const conn of conns) conn.flush()
      if (elapsed >= ms) {
        clearInterval(timer)
        resolve()
      }
    }, 2)
  })
  return sent
}

const quantile = (sorted, p) => (sorted.length === 0 ? undefined : Number(sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))].toFixed(1)))

await load(bench, row.base, { ms: 3000, connections: 50 })
const { result: counted, cpu: capacityCpu } = await busy(() => load(bench, row.base, { ms: 5000, connections: 50 }))
// What one Portcullis core serves: requests per CPU-second it spent (a closed loop of 50 connections keeps it 50-90 %
// busy on this VM, bounded by the round trips rather than by its CPU, and that share moves from run to run).
const capacity = Math.round(counted / 5 / capacityCpu.portcullis)
console.log(JSON.stringify({ capacity, cpu: capacityCpu }))

const results = []
for (const level of LEVELS) {
  let largestRss = rssKb()
  const sampler = setInterval(() => { largestRss = Math.max(largestRss, rssKb()) }, 100)
  const start = performance.now()
  const record = recorder(start)
  const conns = Array.from({ length: CONNECTIONS }, () => new Connection((status, at) => record.answer(status, at)))
  const { result: sent, cpu } = await busy(() => offer(conns, capacity * level, SECONDS * 1000))
  const dropped = performance.now()
  const sentAfter = await offer(conns, capacity * 0.25, RECOVERY_MS)
  // Whatever is still unanswered gets 5 s more.
  for (let i = 0; i < 50 && conns.some((conn) => conn.due.length > 0); i++) await sleep(100)
  clearInterval(sampler)
  const unanswered = conns.reduce((sum, conn) => sum + conn.due.length, 0)
  for (const conn of conns) conn.socket.destroy()
  const loaded = record.windows.slice(0, Math.floor((SECONDS * 1000) / WINDOW_MS)).filter(Boolean)
  const ok = loaded.flatMap((w) => w.ok).sort((a, b) => a - b)
  const shed = loaded.flatMap((w) => w.shed).sort((a, b) => a - b)
  const other = loaded.reduce((sum, w) => sum + w.other, 0)
  // Back to normal: the first window after the drop from which on every window has p99 < 50 ms and no 503.
  const firstAfter = Math.ceil((dropped - start) / WINDOW_MS)
  const after = record.windows.slice(firstAfter)
  let recovered = undefined
  for (let i = 0; i < after.length; i++) {
    const rest = after.slice(i)
    if (rest.every((w) => !w || (w.shed.length === 0 && (quantile([...w.ok].sort((a, b) => a - b), 0.99) ?? 0) < 50))) {
      recovered = i * WINDOW_MS
      break
    }
  }
  const result = {
    level, offered: Math.round(sent / SECONDS), goodput: Math.round(ok.length / SECONDS), share: Number((ok.length / SECONDS / capacity).toFixed(3)),
    shedPerSecond: Math.round(shed.length / SECONDS), other, okP50: quantile(ok, 0.5), okP99: quantile(ok, 0.99), okMax: quantile(ok, 1),
    shedP50: quantile(shed, 0.5), shedP99: quantile(shed, 0.99), largestRssMb: Math.round(largestRss / 1024), recoveredMs: recovered,
    sentAfter, unanswered, cpu,
  }
  results.push(result)
  console.log(JSON.stringify(result))
  await sleep(2000)
}
row.proc.proc.kill('SIGTERM')

// What a shed request costs: the same row with max_in_flight 1 under 50 connections of closed loop, where nearly
// every request is answered 503; Portcullis's CPU over the answers.
const shedding = await startRow(bench, 'd', opts.build, { prefix: ['taskset', '-c', '0'], extraConfig: { server: 'admission: { max_in_flight: 1 }' } })
const shedPool = new Pool(shedding.base, { connections: 50 })
const statuses = { ok: 0, shed: 0 }
const shedPid = shedding.proc.proc.pid
const closedLoop = async (ms) => {
  const end = performance.now() + ms
  await Promise.all(Array.from({ length: 50 }, async () => {
    while (performance.now() < end) {
      const res = await shedPool.request({ path: '/api/items/42', method: 'GET', headers: { authorization: `Bearer ${bench.token}` } })
      await res.body.dump()
      if (res.statusCode === 200) statuses.ok++
      else if (res.statusCode === 503) statuses.shed++
    }
  }))
}
await closedLoop(3000)
statuses.ok = statuses.shed = 0
const cpuBefore = cpuOf(shedPid)
await closedLoop(5000)
const shedCpu = cpuOf(shedPid) - cpuBefore
await shedPool.close()
shedding.proc.proc.kill('SIGTERM')
bench.upstream.proc.kill('SIGTERM')
const perRequest = 1e6 / capacity
const perShed = (shedCpu * 1e6 - statuses.ok * perRequest) / statuses.shed
console.log(JSON.stringify({ shedCost: { shed: statuses.shed, ok: statuses.ok, cpuSeconds: shedCpu, usPerShed: Number(perShed.toFixed(1)), usPerRequest: Number(perRequest.toFixed(1)) } }))

console.log(`\ncapacity (200s per Portcullis CPU-second, closed loop, 50 connections): ${capacity} requests/s (CPU: Portcullis ${capacityCpu.portcullis}, upstream ${capacityCpu.upstream}, client ${capacityCpu.client}); open loop on ${CONNECTIONS} pipelined connections, ${SECONDS} s a level` +
  (opts.server ? `; server: { ${opts.server} }` : ''))
console.log('| offered | goodput (200/s) | of capacity | 503/s | 200 p50 / p99 / max (ms) | 503 p99 (ms) | largest RSS | normal again after the drop |')
console.log('|---|---|---|---|---|---|---|---|')
for (const r of results) {
  console.log(`| ${r.level}× (${r.offered}/s) | ${r.goodput} | ${(r.share * 100).toFixed(0)} % | ${r.shedPerSecond} | ${r.okP50} / ${r.okP99} / ${r.okMax} | ${r.shedP99 ?? '—'} | ${r.largestRssMb} MB | ${r.recoveredMs === undefined ? 'not within 3 s' : `${r.recoveredMs} ms`} |`)
}
console.log(`\na shed request costs ${perShed.toFixed(1)} µs of Portcullis CPU, a forwarded one ${perRequest.toFixed(1)} µs (${(perShed / perRequest * 100).toFixed(0)} %)`)
process.exit(0)
