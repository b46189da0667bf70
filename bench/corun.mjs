#!/usr/bin/env node
// Two proxy rows at once on one core, and the ratio of their CPU per request (issue 24). A measurement, not a test.
//
//   npm run build && node bench/corun.mjs [--pair floor,d] [--rounds 8] [--duration 5] [--connections 25]
//                                         [--against DIR]
//   node bench/corun.mjs --alternate [--pair floor,d] [--pairs 6] [--slices 40] [--slice-ms 250] [--connections 50]
//                                    [--client undici|autocannon]
//                                    [--against DIR]
//
// Why: on this VM a row's CPU per request moves by tens of per cent between runs a minute apart (the same
// (floor) from 37 to 112 µs), so a ratio of two rows measured one after the other, as bench/run.mjs does, is
// only as good as the VM was steady. Here both processes under test run at the same time, pinned to CPU 0
// (taskset), each loaded by its own closed-loop load of `connections` keep-alive connections from this
// process, pinned to CPU 1 with the upstream; each round reads both processes' CPU time (/proc, every
// thread, user + system) over the same seconds, so whatever the VM does to one it does to the other. A round's
// ratio is the second row's CPU per request over the first's; reported: every round's and their median. Half
// the rounds run with the first row's process started and loaded first, half (fresh processes) with the
// second's: the order alone moved a row against itself by about 1 %.
// --against DIR: the second row runs DIR's build (a checkout with dist/ and node_modules), for an A/B of the
// same row (`--pair d,d --against ../old`).
//
// --alternate: the two rows loaded one at a time instead, in alternating slices (rows.mjs `alternate`): each
// slice has the CPU to itself, as in bench/run.mjs, and the VM's drift falls on both; `--pairs` fresh process pairs.
// Checked on itself here (2026-11-26, --alternate): (floor) over (floor) 0.947–1.05 a process pair, median 0.998.
// What it is not: the two share CPU 0 and its caches, so each row's µs per request is higher than alone (about
// twice), and not what bench/run.mjs reports; only the ratio is the result. The faster row answers more
// requests, as a closed loop does. Checked on itself: (floor) against (floor) and (d) against (d) give
// 0.97–1.03 a round, and medians within 1.5 % of 1 before the order was alternated.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { parseArgs } from 'node:util'
import { cpuMicros } from './cpu.mjs'
import { ROWS, alternate, load, root, startBench, startRow } from './rows.mjs'

const { values: opts } = parseArgs({
  options: {
    pair: { type: 'string', default: 'floor,d' },
    rounds: { type: 'string', default: '8' },
    duration: { type: 'string', default: '5' },
    connections: { type: 'string' },
    warmup: { type: 'string', default: '5' },
    against: { type: 'string' },
    alternate: { type: 'boolean', default: false },
    pairs: { type: 'string', default: '6' },
    slices: { type: 'string', default: '40' },
    'slice-ms': { type: 'string', default: '250' },
    client: { type: 'string', default: 'undici' },
  },
})
const pair = opts.pair.split(',')
if (pair.length !== 2 || !pair.every((row) => ROWS.includes(row))) throw new Error(`--pair is two of ${ROWS.join(', ')}, e.g. floor,d`)
if (spawnSync('taskset', ['-c', '0', 'true']).status !== 0) throw new Error('taskset is needed (util-linux) and two CPUs')
const connections = Number(opts.connections ?? (opts.alternate ? 50 : 25))
const ms = Number(opts.duration) * 1000

// This process (the load) and the upstream on CPU 1; the two processes under test on CPU 0.
spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-corun-'))
const bench = await startBench(dir, ['taskset', '-c', '1'])
const builds = [root, opts.against ? path.resolve(opts.against) : root]
const label = (i) => `${pair[i]}${opts.against && i === 1 ? ` (${builds[1]})` : ''}`
let rows = []
if (opts.alternate) {
  try {
    const result = await alternate(bench, pair, {
      builds, processPairs: Number(opts.pairs), slices: Number(opts.slices), sliceMs: Number(opts['slice-ms']), client: opts.client,
      connections, prefix: ['taskset', '-c', '0'], log: console.log,
    })
    console.log(JSON.stringify({ mode: 'alternate', client: opts.client, pair, against: opts.against ?? null, ratios: result.ratios.map((r) => Number(r.toFixed(3))),
      medianRatio: Number(result.median.toFixed(3)), wholeMedianRatio: Number(result.wholeMedian.toFixed(3)), microsPerRequest: result.microsPerRequest.map((m) => Number(m.toFixed(1))) }))
  } finally {
    bench.upstream.proc.kill()
    rmSync(dir, { recursive: true, force: true })
  }
  process.exit(0)
}
/** Starts the two rows, the one of index `first` first. */
async function startRows(first) {
  const started = []
  for (const i of [first, 1 - first]) started[i] = await startRow(bench, pair[i], builds[i], { prefix: ['taskset', '-c', '0'] })
  return started
}
try {
  const ratios = []
  const rounds = Number(opts.rounds)
  // Half the rounds with the first row started (and loaded) first, half with the second: which process comes
  // first was measured to matter by about 1 % (the second looked cheaper), and the halves cancel it out.
  for (const first of [0, 1]) {
    rows = await startRows(first)
    await Promise.all(rows.map((row) => load(bench, row.base, { ms: Number(opts.warmup) * 1000, connections })))
    const half = first === 0 ? Math.ceil(rounds / 2) : Math.floor(rounds / 2)
    for (let r = 0; r < half; r++) {
      const before = rows.map((row) => cpuMicros(row.proc.proc.pid))
      const order = first === 0 ? [0, 1] : [1, 0]
      const answered = []
      await Promise.all(order.map(async (i) => { answered[i] = await load(bench, rows[i].base, { ms, connections }) }))
      const perRequest = rows.map((row, i) => (cpuMicros(row.proc.proc.pid) - before[i]) / answered[i])
      ratios.push(perRequest[1] / perRequest[0])
      console.log(`round ${ratios.length} (${label(first)} first): ${label(0)} ${perRequest[0].toFixed(1)} µs/req (${answered[0]} req), ` +
        `${label(1)} ${perRequest[1].toFixed(1)} µs/req (${answered[1]} req), ratio ${ratios.at(-1).toFixed(3)}`)
    }
    for (const row of rows) row.proc.proc.kill('SIGKILL')
    rows = []
  }
  const sorted = [...ratios].sort((a, b) => a - b)
  const median = (sorted[(sorted.length - 1) >> 1] + sorted[sorted.length >> 1]) / 2
  console.log(JSON.stringify({ pair, against: opts.against ?? null, connections, seconds: ms / 1000, ratios: ratios.map((r) => Number(r.toFixed(3))),
    medianRatio: Number(median.toFixed(3)), min: Number(sorted[0].toFixed(3)), max: Number(sorted.at(-1).toFixed(3)) }))
} finally {
  for (const row of rows) row.proc.proc.kill('SIGKILL')
  bench.upstream.proc.kill()
  rmSync(dir, { recursive: true, force: true })
}
process.exit(0)
