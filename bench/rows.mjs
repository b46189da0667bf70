// The proxy rows measured outside bench/run.mjs's reps (issue 24): bench/callgrind.mjs counts their instructions,
// bench/corun.mjs their CPU time two at a time, `alternate` (below; corun.mjs --alternate, and run.mjs for (d) over
// the floor) in alternating slices. (floor) is bench/minimal-proxy.mjs, and (floor-beside-d) the same
// in a process that also runs Portcullis with (d)'s config, serving nothing; (c) and (d) are
// `portcullis start` with bench/run.mjs's (c) and (d) configs (log level warn) and the node arguments it ships with
// (src/server/young-generation.ts), and V8's inlining budget the CLI raises itself (src/server/inlining-budget.ts;
// the floor rows do not raise it: node's defaults, but (floor-budget), the floor with the same budget, for a
// like-for-like ratio); the upstream is
// bench/servers.mjs. The load is closed-loop over keep-alive connections (undici; or autocannon, `cannonLoader`), one
// token, GET /api/items/42.
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { Pool } from 'undici'
import autocannon from 'autocannon'
import { AUDIENCE, ISSUER, generateKeys, mintTokens } from './tokens.mjs'
import { cpuMicrosPrecise } from './cpu.mjs'
import { youngGenerationArgs } from '../dist/server/young-generation.js'
import { INLINING_FLAG } from '../dist/server/inlining-budget.js'

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
export const ROWS = ['floor', 'floor-budget', 'c', 'd', 'floor-beside-d']
/** What Portcullis starts with on this node (`npm start`, the workers): the young generation's size where it pays. */
const PORTCULLIS_NODE_ARGS = youngGenerationArgs([], process.env.NODE_OPTIONS)
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
/** The median of a non-empty list of numbers (of an even count, the mean of the two middle ones). */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b)
  return (sorted[(sorted.length - 1) >> 1] + sorted[sorted.length >> 1]) / 2
}

/** Runs `argv`, keeping its output. */
export function start(argv) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], cwd: root })
  let out = ''
  let err = ''
  proc.stdout.on('data', (chunk) => { out += chunk })
  proc.stderr.on('data', (chunk) => { err += chunk })
  return { proc, out: () => out, err: () => err }
}

/** The port a helper prints as {"port":N} once listening. */
export async function portOf(started) {
  for (let i = 0; i < 12_000; i++) {
    const found = started.out().match(/"port":(\d+)/)
    if (found) return Number(found[1])
    if (started.proc.exitCode !== null) break
    await sleep(10)
  }
  throw new Error(`no port: ${started.err().slice(0, 500)}`)
}

/** The upstream (run with `prefix`, e.g. taskset), a JWKS file in `dir` and one ES256 token for it. */
export async function startBench(dir, prefix = []) {
  const upstream = start([...prefix, process.execPath, 'bench/servers.mjs', 'upstream'])
  const upstreamUrl = `http://127.0.0.1:${await portOf(upstream)}`
  const keys = generateKeys()
  const jwksFile = path.join(dir, 'jwks.json')
  writeFileSync(jwksFile, JSON.stringify(keys.jwks))
  const token = mintTokens('ES256', keys.ES256, { count: 1, prefix: 'load-user-' })[0]
  return { dir, upstream, upstreamUrl, jwksFile, token }
}

/** bench/run.mjs's (c) or (d) config on `port`. */
function config(bench, row, port, { server = '', top = '' } = {}) {
  const routes = row === 'c'
    ? 'routes: [ { id: items, path: "/api/**", upstream: items, auth: none } ]'
    : `issuers:\n  - { issuer: "${ISSUER}", jwks_file: "${bench.jwksFile}", audience: [${AUDIENCE}], algorithms: [ES256, RS256] }\n` +
      'routes:\n  - { id: items, path: "/api/**", upstream: items, scopes: { all: ["items:read"] } }'
  return `server: { listen: "127.0.0.1:${port}"${server && `, ${server}`} }\nupstreams: { items: { url: "${bench.upstreamUrl}" } }\n${routes}\nlog: { level: warn }\n` +
    'forward: { identity_headers: { subject: X-Auth-Subject, client_id: X-Auth-Client-Id, scopes: X-Auth-Scopes, issuer: X-Auth-Issuer } }\n' + top
}

let started = 0

/** A port the OS says is free now (for Portcullis, whose config names its port). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

/**
 * Starts `row` of the build in `build` (a checkout with dist/ and node_modules) under `prefix` (valgrind, taskset:
 * they exec it, so the pid is the process under test's), with `nodeArgs` and `extraConfig` (YAML:
 * `server`, flow-map entries added to the row's `server:`; `top`, top-level keys it does not set); resolves once it answers 200.
 */
export async function startRow(bench, row, build, { prefix = [], nodeArgs = [], extraConfig = {} } = {}) {
  const file = path.join(bench.dir, `portcullis-${row}-${++started}.yaml`)
  if (row.startsWith('floor')) {
    // floor-beside-d: the floor in a process that also runs Portcullis with (d)'s config (serving nothing), with its node arguments.
    // floor-budget: the floor given the inlining budget Portcullis raises itself, for a like-for-like ratio.
    const beside = row === 'floor-beside-d'
    if (beside) writeFileSync(file, config(bench, 'd', await freePort()))
    const budget = row === 'floor-budget' ? [INLINING_FLAG] : []
    const proc = start([...prefix, process.execPath, ...(beside ? PORTCULLIS_NODE_ARGS : []), ...budget, ...nodeArgs,
      path.join(build, 'bench/minimal-proxy.mjs'), bench.upstreamUrl, ...(beside ? [file] : [])])
    return { proc, base: `http://127.0.0.1:${await portOf(proc)}` }
  }
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    writeFileSync(file, config(bench, row, port, extraConfig))
    const proc = start([...prefix, process.execPath, ...PORTCULLIS_NODE_ARGS, ...nodeArgs, path.join(build, 'dist/cli.js'), 'start', '--config', file])
    const base = `http://127.0.0.1:${port}`
    for (let i = 0; ; i++) {
      const up = await fetch(`${base}/api/items/42`, { headers: { authorization: `Bearer ${bench.token}` } }).then((res) => res.status === 200, () => false)
      if (up) return { proc, base }
      if (i > 1_200 || proc.proc.exitCode !== null) break
      await sleep(100)
    }
    proc.proc.kill('SIGKILL')
    // The port may have been taken between freePort() and the listen (a load's own sockets): try another one.
    if (attempt >= 3 || !/EADDRINUSE/.test(proc.err())) throw new Error(`did not start: ${proc.err().slice(-500)}`)
  }
}

/**
 * Closed-loop load on `base` over `connections` keep-alive connections: `count` requests, or as many as fit in
 * `ms`. Resolves with the number answered; throws if any was not answered 200.
 */
export async function load(bench, base, { count = Infinity, ms = Infinity, connections = 20 }) {
  const loading = loader(bench, base, connections)
  try {
    return await loading.run({ count, ms })
  } finally {
    await loading.close()
  }
}

/** A load on `base` whose keep-alive connections stay open between runs (`run` as `load`), until `close`. */
export function loader(bench, base, connections) {
  const pool = new Pool(base, { connections })
  return {
    async run({ count = Infinity, ms = Infinity }) {
      const end = performance.now() + ms
      let sent = 0
      let answered = 0
      let failed = 0
      await Promise.all(Array.from({ length: connections }, async () => {
        while (sent < count && performance.now() < end) {
          sent++
          const res = await pool.request({ path: '/api/items/42', method: 'GET', headers: { authorization: `Bearer ${bench.token}` } })
          await res.body.text()
          if (res.statusCode === 200) answered++
          else failed++
        }
      }))
      if (failed > 0) throw new Error(`${failed} of ${answered + failed} requests were not answered 200`)
      return answered
    },
    close: () => pool.close(),
  }
}

/**
 * The same load from autocannon, as bench/run.mjs's reps: it keeps the process under test busier than the undici
 * client does (more of the requests in flight wait in the server); measured one after the other, (d) seemed to pay
 * more for that than the floor, in alternation it did not (docs/performance.md). Its connections do not outlive a run: each run opens `connections` new ones, and the
 * requests in flight when it stops are served but not counted (both under 1 % of a 1 s slice, alike for both rows).
 */
export function cannonLoader(bench, base, connections) {
  return {
    async run({ ms }) {
      const result = await autocannon({ url: `${base}/api/items/42`, connections, duration: ms / 1000, sampleInt: 100,
        headers: { authorization: `Bearer ${bench.token}` } })
      if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} answers not 2xx and ${result.errors} errors of ${result.requests.total}`)
      return result['2xx']
    },
    close: async () => {},
  }
}

/**
 * The CPU per request of two rows, measured in alternation (issue 24): `pair` (two of ROWS) started side by side,
 * each pinned to the same CPU (`prefix`, e.g. taskset -c 0) and warmed up alone, then loaded one at a time in
 * `slices` slices of `sliceMs` each, first one row then the other (the order swapped every slice pair). A slice
 * has the CPU to itself, as a row measured alone does; and whatever the VM does over a second or two (on these
 * VMs a row's CPU per request moves by 20 % from one second to the next) falls on both rows alike. Each slice's
 * CPU time is every thread's, to the nanosecond (cpuMicrosPrecise). That is one process pair; `processPairs`
 * fresh pairs are measured (two processes of the same build differ by a few per cent: code and heap layout),
 * half started with the first row first. Returns each pair's ratio (second row's CPU per request over the
 * first's, over all its slices), their median, the same with each row's idle slices counted too (`wholeRatios`,
 * `wholeMedian`), and each row's µs per request over everything.
 */
export async function alternate(bench, pair, { builds = [root, root], slices = 40, sliceMs = 250, connections = 50, warmupMs = 3000,
  processPairs = 6, prefix = [], cpu = cpuMicrosPrecise, client = 'undici', log = () => {} } = {}) {
  const loaderOf = client === 'autocannon' ? cannonLoader : loader
  const totals = { cpu: [0, 0], requests: [0, 0] }
  const ratios = []
  const wholeRatios = []
  for (let p = 0; p < processPairs; p++) {
    const first = p % 2
    const rows = []
    const loads = []
    try {
      for (const i of [first, 1 - first]) rows[i] = await startRow(bench, pair[i], builds[i], { prefix })
      for (const i of [first, 1 - first]) loads[i] = loaderOf(bench, rows[i].base, connections)
      for (const i of [first, 1 - first]) await loads[i].run({ ms: warmupMs })
      const used = [0, 0]
      const answered = [0, 0]
      const startedAt = rows.map((row) => cpu(row.proc.proc.pid))
      for (let s = 0; s < slices; s++) {
        const i = (s + first + (s >> 1)) % 2
        const pid = rows[i].proc.proc.pid
        const before = cpu(pid)
        answered[i] += await loads[i].run({ ms: sliceMs })
        used[i] += cpu(pid) - before
      }
      const ratio = (used[1] / answered[1]) / (used[0] / answered[0])
      ratios.push(ratio)
      // The same over the whole alternation, each row's idle slices counted too: work a row defers past its
      // slice's last answer (and its timers) falls there, and must not be left out.
      const whole = rows.map((row, i) => (cpu(row.proc.proc.pid) - startedAt[i]) / answered[i])
      wholeRatios.push(whole[1] / whole[0])
      for (const i of [0, 1]) {
        totals.cpu[i] += used[i]
        totals.requests[i] += answered[i]
      }
      log(`process pair ${p + 1}/${processPairs} (${pair[first]} started first): ${pair[0]} ${(used[0] / answered[0]).toFixed(1)} µs/req, ` +
        `${pair[1]} ${(used[1] / answered[1]).toFixed(1)} µs/req, ratio ${ratio.toFixed(3)} (idle slices counted too: ${wholeRatios.at(-1).toFixed(3)})`)
    } finally {
      await Promise.all(loads.map((load) => load?.close()))
      for (const row of rows) row?.proc.proc.kill('SIGKILL')
    }
  }
  return {
    ratios,
    median: median(ratios),
    wholeRatios,
    wholeMedian: median(wholeRatios),
    microsPerRequest: totals.cpu.map((c, i) => c / totals.requests[i]),
  }
}
