// Does a hot reload of a large route table stall requests in flight? (a measurement, not a test)
//   npm run build && node bench/reload.mjs [--routes 10000] [--rate 400] [--warmup 10] [--seconds 8] [--reloads 3] [--pin] [--profile DIR] [--against DIR]
//     [--change quarter|one|all]
// Starts `portcullis start` (this build, or DIR's) with `routes` routes to the built-in echo upstream, sends
// requests on a fixed schedule (open loop: one every 1/rate s, whatever the answers do), and SIGHUPs a changed file
// `reloads` times, from the second second on. Each request's latency is put in the
// window it was sent in: during a reload (from the signal to the "config reloaded" line, plus 100 ms) or not. The
// first `warmup` seconds of the schedule are not counted, and no reload is sent in them: a gateway in service has
// run its request path long enough for V8 to have optimized it (at 400 requests/s that takes a few seconds, and
// without the warm-up that compiling, on threads of their own, landed in the first reloads' windows).
// Prints p50/p99/max of both and how many took over 10 ms, and each reload's duration from the log. --pin: Portcullis (and its reload worker) on
// CPU 0 alone, this load generator on CPU 1 (taskset): a reload then competes with the requests for one core.
// --change: what each reload changes. quarter (the default): the id of one route in four (2,500 of 10,000 rules
// compiled again, the rest kept); one: the id of one route; all: `server.realm` too, which every rule depends on, so
// every rule is compiled again (what every reload did before a reload kept unchanged routes' rules).
// --profile DIR: V8 CPU profiles of Portcullis's threads (the main one and each loader) into DIR.
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { clearInterval, setInterval } from 'node:timers'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import { stringify } from 'yaml'

const { values: opts } = parseArgs({
  options: {
    routes: { type: 'string', default: '10000' }, rate: { type: 'string', default: '400' }, seconds: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '10' },
    reloads: { type: 'string', default: '3' }, against: { type: 'string' }, pin: { type: 'boolean', default: false },
    profile: { type: 'string' }, change: { type: 'string', default: 'quarter' },
  },
})
if (!['quarter', 'one', 'all'].includes(opts.change)) throw new Error('--change is quarter, one or all')
const root = path.resolve(opts.against ?? path.join(import.meta.dirname, '..'))
const ROUTES = Number(opts.routes)
const RATE = Number(opts.rate)
const SECONDS = Number(opts.seconds)
const RELOADS = Number(opts.reloads)
const WARMUP_MS = Number(opts.warmup) * 1000
const PORT = 20000 + Math.floor(Math.random() * 20000)

function configText(generation) {
  const routes = []
  for (let i = 0; routes.length < ROUTES; i++) {
    routes.push(
      { id: `list-${i}`, path: `/svc-${i}/v1/items`, upstream: 'echo', auth: 'none', methods: ['GET', 'POST'] },
      { id: `item-${i}`, path: `/svc-${i}/v1/items/{id}`, upstream: 'echo', auth: 'none', methods: ['GET', 'PUT', 'DELETE'] },
      { id: `search-${i}`, path: `/svc-${i}/v1/*/search`, upstream: 'echo', auth: 'none', methods: ['GET'] },
      { id: opts.change === 'one' && i > 0 ? `rest-${i}` : `rest-${i}-g${generation}`, path: `/svc-${i}/**`, upstream: 'echo', auth: 'none' },
    )
  }
  const server = { listen: `127.0.0.1:${PORT}`, ...(opts.change === 'all' && { realm: `portcullis-${generation}` }) }
  return stringify({ server, log: { level: 'info' }, upstreams: { echo: { url: 'builtin:echo' } }, routes: routes.slice(0, ROUTES) })
}

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-reload-'))
const file = path.join(dir, 'portcullis.yaml')
writeFileSync(file, configText(0))
const command = [process.execPath, '--max-semi-space-size=64',
  ...(opts.profile === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${path.resolve(opts.profile)}`]),
  path.join(root, 'dist/cli.js'), 'start', '--config', file]
if (opts.pin) {
  execFileSync('taskset', ['-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })
  command.unshift('taskset', '-c', '0')
}
const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] })
const reloaded = []
const parts = []
const builds = []
let buffer = ''
child.stdout.setEncoding('utf8').on('data', (chunk) => {
  buffer += chunk
  let nl
  while ((nl = buffer.indexOf('\n')) !== -1) {
    const line = buffer.slice(0, nl)
    buffer = buffer.slice(nl + 1)
    if (line.includes('"config reloaded"')) {
      reloaded.push(performance.now())
      // Builds that log them: the loader thread's part and the event loop's (load_ms, build_ms).
      const { load_ms: load, build_ms: build } = JSON.parse(line)
      if (load !== undefined) parts.push(`${load}+${build}`)
      builds.push(build ?? 0)
    }
  }
})
const agent = new Agent({ connections: 64, pipelining: 1 })
const base = `http://127.0.0.1:${PORT}`
for (let tries = 0; ; tries++) {
  try {
    const res = await request(`${base}/svc-1/v1/items`, { dispatcher: agent })
    await res.body.dump()
    if (res.statusCode === 200) break
  } catch { /* not listening yet */ }
  if (tries > 600) throw new Error('portcullis did not start')
  await sleep(100)
}

// The files are made before the load starts: making one (yaml's stringify of 10,000 routes) holds this thread
// long enough to delay the requests due meanwhile, which would be counted as Portcullis's latency.
const texts = Array.from({ length: RELOADS }, (_, r) => configText(r + 1))
const samples = []
const signals = []
const started = performance.now()
const services = Math.floor(ROUTES / 4)
let sent = 0
const inFlight = []
const tick = async () => {
  const due = Math.floor(((performance.now() - started) / 1000) * RATE)
  while (sent < due) {
    const n = sent++
    const at = performance.now()
    const path = `/svc-${(n * 7919) % services}/v1/items/${n}`
    inFlight.push(request(`${base}${path}`, { dispatcher: agent, method: 'PUT', body: '' }).then(async (res) => {
      await res.body.dump()
      if (at >= started + WARMUP_MS) samples.push({ at, ms: performance.now() - at, status: res.statusCode })
    }, () => { if (at >= started + WARMUP_MS) samples.push({ at, ms: performance.now() - at, status: 0 }) }))
  }
}
const timer = setInterval(tick, 1)
// Each reload is sent a second and a half after the previous one finished (its "config reloaded" line), so the
// windows never overlap however long a reload takes.
for (let r = 1; r <= RELOADS; r++) {
  await sleep(r === 1 ? WARMUP_MS + 2000 : 1500)
  writeFileSync(file, texts[r - 1])
  signals.push(performance.now())
  child.kill('SIGHUP')
  while (reloaded.length < r) await sleep(10)
}
await sleep(Math.max(0, WARMUP_MS + SECONDS * 1000 - (performance.now() - started)))
clearInterval(timer)
await Promise.all(inFlight)
child.kill('SIGTERM')
await agent.close()

const windows = signals.map((signal) => [signal, (reloaded.find((at) => at > signal) ?? signal) + 100])
const during = (at) => windows.some(([from, to]) => at >= from && at <= to)
const stats = (list) => {
  const ms = list.map((sample) => sample.ms).sort((a, b) => a - b)
  const q = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]?.toFixed(2)
  // How many waited over 10 ms: a count that does not depend on how long the window is (a shorter reload with the
  // same stalls has fewer requests in its window, and so a higher p99).
  return { requests: ms.length, p50: q(0.5), p99: q(0.99), max: ms.at(-1)?.toFixed(2), over10ms: ms.filter((value) => value > 10).length, failed: list.filter((sample) => sample.status !== 200).length }
}
// The window in its parts: the load on the loader thread (and the routes taken in), the build on the event loop, the 100 ms after.
const inPart = (part) => samples.filter((sample) => windows.some(([from, to], r) => {
  const built = to - 100
  const building = built - (builds[r] ?? 0)
  return part === 'load' ? sample.at >= from && sample.at < building : part === 'build' ? sample.at >= building && sample.at <= built : sample.at > built && sample.at <= to
}))
const steady = samples.filter((sample) => !during(sample.at))
const reloading = samples.filter((sample) => during(sample.at))
console.log(JSON.stringify({
  build: root, routes: ROUTES, rate: RATE,
  reloadMs: windows.map(([from, to]) => Math.round(to - 100 - from)), loadPlusBuildMs: parts,
  change: opts.change, steady: stats(steady), duringReload: stats(reloading),
  parts: { load: stats(inPart('load')), build: stats(inPart('build')), after: stats(inPart('after')) },
}))
