#!/usr/bin/env node
// What blanket HTTP auto-instrumentation costs on Node (issue 22 asked to measure it before choosing): the
// (floor) proxy of bench/run.mjs, alone and with OpenTelemetry's @opentelemetry/instrumentation-http
// preloaded (bench/otel-auto.cjs: 5 % sampling, a batch processor, spans dropped), interleaved reps,
// CPU µs per request of the proxy. Portcullis's own spans are the d-trace row of `npm run bench`.
//
//   taskset -c 1 node bench/auto-instrumentation.mjs [--reps 5] [--duration 5]
import { spawn } from 'node:child_process'
import readline from 'node:readline'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'
import { cpuMicros } from './cpu.mjs'

const { values: opts } = parseArgs({ options: { reps: { type: 'string' }, duration: { type: 'string' } } })
const REPS = Number(opts.reps ?? 5)
const DURATION = Number(opts.duration ?? 5)
const here = (file) => fileURLToPath(new URL(file, import.meta.url))

/** Starts a helper that prints {"port":N}; pinned to CPU `cpu`. */
async function launch(cpu, args) {
  const proc = spawn('taskset', ['-c', String(cpu), process.execPath, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  const line = await new Promise((resolve, reject) => {
    readline.createInterface({ input: proc.stdout }).once('line', resolve)
    proc.once('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}`)))
  })
  return { proc, port: JSON.parse(line).port }
}

const upstream = await launch(1, [here('./servers.mjs'), 'upstream'])
const rows = { plain: [], auto: [] }
for (let rep = 0; rep < REPS; rep++) {
  for (const kind of ['plain', 'auto']) {
    const preload = kind === 'auto' ? ['--require', here('./otel-auto.cjs')] : []
    const proxy = await launch(0, [...preload, here('./minimal-proxy.mjs'), `http://127.0.0.1:${upstream.port}`])
    const url = `http://127.0.0.1:${proxy.port}/api/items/42`
    await autocannon({ url, connections: 50, duration: 2 })
    const before = cpuMicros(proxy.proc.pid)
    const result = await autocannon({ url, connections: 50, duration: DURATION })
    const micros = (cpuMicros(proxy.proc.pid) - before) / result.requests.total
    rows[kind].push({ rps: result.requests.average, micros })
    proxy.proc.kill('SIGTERM')
    await new Promise((resolve) => proxy.proc.once('exit', resolve))
    console.log(`rep ${rep + 1}/${REPS} ${kind.padEnd(5)} ${Math.round(result.requests.average)} req/s  ${micros.toFixed(1)} µs/req`)
  }
}
upstream.proc.kill()
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const paired = median(rows.auto.map((row, i) => row.micros - rows.plain[i].micros))
console.log(`\n(floor) proxy: ${median(rows.plain.map((r) => r.micros)).toFixed(1)} µs/req, ${Math.round(median(rows.plain.map((r) => r.rps)))} req/s`)
console.log(`with instrumentation-http at 5 %: ${median(rows.auto.map((r) => r.micros)).toFixed(1)} µs/req, ${Math.round(median(rows.auto.map((r) => r.rps)))} req/s; paired median +${paired.toFixed(1)} µs/req`)
