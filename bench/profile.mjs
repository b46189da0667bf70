// Where row (d)'s CPU goes, by function, from V8's sampling profiler: each build in turn under the same load
// (20 keep-alive connections, 150,000 requests), its functions in Portcullis's own modules listed with their
// self time per request, and their sum. For an A/B of a change to the request path, it says how much of the
// process the changed code is at all (2026-11-27: Portcullis's own functions were about 4 % of (d)'s samples,
// the rest node's HTTP server and undici). Sequential, so the totals drift with the VM; compare shares.
// A measurement, not a test.
//
//   npm run build && node bench/profile.mjs [BUILD ...]     (a checkout with dist/ and node_modules; default: this one)
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startBench, startRow, load, sleep } from './rows.mjs'
const builds = process.argv.length > 2 ? process.argv.slice(2) : [path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')]
const dir = mkdtempSync(path.join(os.tmpdir(), 'prof-'))
const bench = await startBench(dir)
for (const build of builds) {
  const out = path.join(dir, path.basename(build))
  const { proc, base } = await startRow(bench, 'd', build, { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${out}`, '--cpu-prof-interval=200'] })
  await load(bench, base, { count: 150000, connections: 20 })
  proc.proc.kill('SIGTERM')
  for (let i = 0; i < 100 && proc.proc.exitCode === null; i++) await sleep(100)
  const file = readdirSync(out).find((f) => f.endsWith('.cpuprofile'))
  const prof = JSON.parse(readFileSync(path.join(out, file), 'utf8'))
  const self = new Map()
  const dt = new Map()
  for (let i = 0; i < prof.samples.length; i++) dt.set(prof.samples[i], (dt.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0))
  let total = 0
  for (const node of prof.nodes) {
    const t = dt.get(node.id) ?? 0
    const cf = node.callFrame
    const key = `${cf.functionName || '(anon)'} ${path.basename(cf.url)}:${cf.lineNumber}`
    self.set(key, (self.get(key) ?? 0) + t)
    total += t
  }
  console.log(`== ${build}: total ${(total / 1000).toFixed(0)} ms, ${(total / 150000).toFixed(2)} µs/req sampled`)
  const ours = /(exchange|stages|route|token|limits|forward|decide|pipeline|authenticate|request-record|refuse|upstream-headers|authenticator|bearer|token-cache|scopes|match|segments|normalize|proxy|metrics|plain|request-body|header-policy|response-headers|field-strings)\.js/
  const rows = [...self].filter(([k]) => ours.test(k)).sort((a, b) => b[1] - a[1])
  console.log(`ours: ${(rows.reduce((n, [, v]) => n + v, 0) / 150000).toFixed(3)} µs/req`)
  for (const [k, v] of rows) console.log(`${(v / 150000).toFixed(3)} µs  ${(100 * v / total).toFixed(1)}%  ${k}`)
}
bench.upstream.proc.kill()
process.exit(0)
