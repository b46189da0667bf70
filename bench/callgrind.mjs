#!/usr/bin/env node
// Instructions per request of a proxy row, counted by valgrind's callgrind (issue 24): for A/B of changes
// smaller than a noisy VM's run-to-run spread in CPU time. A measurement, not a test.
//
//   npm run build && node bench/callgrind.mjs [--scenario floor|c|d] [--reps 3] [--warmup 40000]
//                                             [--requests 5000] [--against DIR]
//
// The process under test (bench/minimal-proxy.mjs for (floor); `portcullis start` with bench/run.mjs's (c)
// or (d) config otherwise, log level warn) runs under `valgrind --tool=callgrind --smc-check=all-non-file`
// with counting off; the upstream (bench/servers.mjs) and this process, the load (20 keep-alive connections,
// undici), run beside it. After `warmup` requests counting is switched on for `requests` more, then dumped.
// Reported: every thread's instructions per request except those of V8's compilers and parsers, which under
// valgrind keep compiling long after the warm-up and add 1,000 to 23,000 a request, differently each run;
// `total` includes them. --against DIR: the same on DIR's build (a checkout with dist/ and node_modules),
// interleaved rep by rep. Needs valgrind (Debian's package). Each rep takes about a minute.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { ROWS, load, median, root, sleep, startBench, startRow } from './rows.mjs'

const { values: opts } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'd' },
    reps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '40000' },
    requests: { type: 'string', default: '5000' },
    against: { type: 'string' },
  },
})
if (!ROWS.includes(opts.scenario)) throw new Error(`--scenario is one of ${ROWS.join(', ')}`)
if (spawnSync('valgrind', ['--version']).status !== 0) throw new Error('valgrind is not installed (apt-get install valgrind)')

/** Symbols of V8's compilation work (C++ in the node binary): left out of the steady count. */
const COMPILING = /compiler::|Compil|Parser|Scanner|Bytecode|Turbofan|Maglev|interpreter::|Deoptimizer|Zone|SourcePosition|baseline::|wasm::/
const CONNECTIONS = 20
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-callgrind-'))
const bench = await startBench(dir)

/** Instructions per symbol of a callgrind dump, by callgrind_annotate. */
function symbols(file) {
  const text = spawnSync('callgrind_annotate', ['--threshold=100', file], { encoding: 'utf8', maxBuffer: 1 << 28 }).stdout
  const out = []
  for (const line of text.split('\n')) {
    const found = line.match(/^\s*([\d,]+) \([^)]*\)\s+(.*)$/)
    if (found && !found[2].includes('PROGRAM TOTALS')) out.push([Number(found[1].replaceAll(',', '')), found[2]])
  }
  return out
}

async function measure(build, rep) {
  const out = path.join(dir, `${path.basename(build)}-${rep}`)
  const valgrind = ['valgrind', '--tool=callgrind', '--smc-check=all-non-file', '--instr-atstart=no', '--cache-sim=no',
    `--callgrind-out-file=${out}.%p`]
  const { proc, base } = await startRow(bench, opts.scenario, build, { prefix: valgrind })
  await load(bench, base, { count: Number(opts.warmup), connections: CONNECTIONS })
  const pid = String(proc.proc.pid)
  spawnSync('callgrind_control', ['-i', 'on', pid])
  await load(bench, base, { count: Number(opts.requests), connections: CONNECTIONS })
  spawnSync('callgrind_control', ['-d', pid])
  proc.proc.kill('SIGKILL')
  await sleep(200)
  const dumps = readdirSync(dir).map((name) => path.join(dir, name)).filter((file) => file.startsWith(`${out}.`) && statSync(file).size > 0)
  let total = 0
  let compiling = 0
  for (const file of dumps) {
    for (const [count, name] of symbols(file)) {
      total += count
      if (COMPILING.test(name)) compiling += count
    }
  }
  const n = Number(opts.requests)
  return { total: Math.round(total / n), steady: Math.round((total - compiling) / n) }
}

const builds = [root, ...(opts.against ? [path.resolve(opts.against)] : [])]
const results = new Map(builds.map((build) => [build, []]))
try {
  for (let rep = 1; rep <= Number(opts.reps); rep++) {
    for (const build of builds) {
      const result = await measure(build, rep)
      results.get(build).push(result)
      console.log(`rep ${rep} ${opts.scenario} ${build === root ? 'this build' : build}: ${result.steady} instructions/request (total ${result.total})`)
    }
  }
} finally {
  bench.upstream.proc.kill()
  rmSync(dir, { recursive: true, force: true })
}
for (const [build, runs] of results) {
  console.log(JSON.stringify({ scenario: opts.scenario, build: build === root ? '.' : build, medianInstructionsPerRequest: median(runs.map((run) => run.steady)),
    reps: runs.map((run) => run.steady) }))
}
process.exit(0)
