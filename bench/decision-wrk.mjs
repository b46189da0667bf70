#!/usr/bin/env node
// Issue 23 with a load generator in C: in bench/run.mjs, autocannon (Node, one core) saturates before nginx
// does, so the nginx rows there are lower bounds. Here wrk (Debian's) drives the same four setups, in the
// same run, interleaved reps, each a fresh set of processes:
//
//   nginx      nginx alone, proxy_pass to the upstream
//   d          Portcullis proxy mode, JWT cache hit (bench/run.mjs's (d) config)
//   n-decide   nginx auth_request → Portcullis decision endpoint (examples/decision/nginx.conf), every request decided
//   n-cache    the same with nginx's decision cache
//   d-w1/d-w2  (d) with server.workers 1 and 2 (issue 24), on both cores beside wrk; CPU of the primary and workers
//
// ONLY=d-w1,d-w2 runs those alone.
// The processes under test (nginx and/or Portcullis) on CPU 0; wrk and the upstream on CPU 1. CPU µs/req is
// the sum over the processes under test. Needs `npm run build`, nginx and wrk.
//
//   node bench/decision-wrk.mjs [--reps 3] [--duration 10] [--connections 50]
import { spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { cpuMicros } from './cpu.mjs'
import { freePort, median, sleep } from './rows.mjs'
import { NGINX, nginxConfig } from './nginx.mjs'
import { AUDIENCE, ISSUER, generateKeys, mintTokens } from './tokens.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values: opts } = parseArgs({ options: { reps: { type: 'string' }, duration: { type: 'string' }, connections: { type: 'string' } } })
const REPS = Number(opts.reps ?? 3)
const DURATION = Number(opts.duration ?? 10)
const CONNECTIONS = Number(opts.connections ?? 50)
const SECRET = 'bench-decision-secret-0123456789abcdef'
const PATH = '/api/items/42'
if (NGINX === undefined || spawnSync('wrk', ['--version']).error) throw new Error('needs nginx (nginx-light) and wrk')

const get = (url, headers = {}) => new Promise((resolve, reject) => {
  http.get(url, { headers, agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)) }).on('error', reject)
})
function launch(cpu, command, args) {
  const child = spawn('taskset', ['-c', String(cpu), command, ...args], { stdio: ['ignore', 'pipe', 'pipe'], cwd: root })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  return { child, pid: child.pid, output: () => output, stop: () => new Promise((resolve) => { child.once('exit', resolve); child.kill('SIGTERM') }) }
}
async function until(url, proc) {
  for (let i = 0; i < 400; i++) {
    if (await get(url).then(() => true, () => false)) return
    if (proc.child.exitCode !== null) break
    await sleep(25)
  }
  throw new Error(`did not start: ${proc.output()}`)
}

const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-wrk-'))
process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
const keys = generateKeys()
const jwksFile = path.join(dir, 'jwks.json')
writeFileSync(jwksFile, JSON.stringify(keys.jwks))
const token = mintTokens('ES256', keys.ES256, { count: 1, prefix: 'load-user-' })[0]
const upstream = launch(1, process.execPath, ['bench/servers.mjs', 'upstream'])
await sleep(300)
const upstreamUrl = `http://127.0.0.1:${JSON.parse(upstream.output().split('\n')[0]).port}`

async function startPortcullis(sub, decisionPort, workers) {
  const port = await freePort()
  const yaml = `
server: { listen: "127.0.0.1:${port}"${workers === undefined ? '' : `, workers: ${workers}`} }
upstreams: { items: { url: "${upstreamUrl}" } }
issuers:
  - { issuer: "${ISSUER}", jwks_file: "${jwksFile}", audience: [${AUDIENCE}], algorithms: [ES256] }
routes:
  - { id: items, path: "/api/**", upstream: items, scopes: { all: ["items:read"] } }
forward: { identity_headers: { subject: X-Auth-Subject, client_id: X-Auth-Client-Id, scopes: X-Auth-Scopes, issuer: X-Auth-Issuer } }
log: { level: warn }
${decisionPort === undefined ? '' : `decision: { listen: "127.0.0.1:${decisionPort}", trust: { addresses: ["127.0.0.1/32"], secret: "${SECRET}" } }`}
`
  mkdirSync(sub, { recursive: true })
  writeFileSync(path.join(sub, 'portcullis.yaml'), yaml)
  // With workers: both cores (the workers beside wrk on CPU 1); their CPU counted with the primary's.
  const proc = launch(workers === undefined ? 0 : '0,1', process.execPath, ['dist/cli.js', 'start', '--config', path.join(sub, 'portcullis.yaml')])
  await until(`http://127.0.0.1:${port}/`, proc)
  const children = []
  for (let i = 0; workers !== undefined && i < 200 && children.length < workers; i++) {
    await sleep(25)
    children.splice(0, children.length, ...readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number))
  }
  return { proc, workers: children.map((pid) => ({ pid, stop: async () => {} })), url: `http://127.0.0.1:${port}${PATH}` }
}

async function startNginx(sub, options) {
  const port = await freePort()
  mkdirSync(sub, { recursive: true })
  const proc = launch(0, NGINX, ['-p', sub, '-c', nginxConfig(sub, { port, upstream: upstreamUrl, ...options })])
  await until(`http://127.0.0.1:${port}/`, proc)
  return { proc, url: `http://127.0.0.1:${port}${PATH}` }
}

const ONLY = process.env.ONLY?.split(',')
const SETUPS_ALL = {
  nginx: async (sub) => { const n = await startNginx(sub, {}); return { procs: [n.proc], url: n.url } },
  d: async (sub) => { const p = await startPortcullis(sub); return { procs: [p.proc], url: p.url } },
  // Issue 24: server.workers 1 and 2, on both cores with wrk (the load generator shares them).
  'd-w1': async (sub) => { const p = await startPortcullis(sub, undefined, 1); return { procs: [p.proc], url: p.url } },
  'd-w2': async (sub) => { const p = await startPortcullis(sub, undefined, 2); return { procs: [p.proc, ...p.workers], url: p.url } },
  'n-decide': async (sub) => decisionPair(sub, false),
  'n-cache': async (sub) => decisionPair(sub, true),
}
const SETUPS = ONLY ? Object.fromEntries(Object.entries(SETUPS_ALL).filter(([id]) => ONLY.includes(id))) : SETUPS_ALL
async function decisionPair(sub, cache) {
  const decisionPort = await freePort()
  const p = await startPortcullis(sub, decisionPort)
  const n = await startNginx(sub, { decision: `127.0.0.1:${decisionPort}`, cache, secret: SECRET })
  return { procs: [n.proc, p.proc], url: n.url }
}

function wrk(url, seconds) {
  const result = spawnSync('taskset', ['-c', '1', 'wrk', '-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '-H', `Authorization: Bearer ${token}`, url], { encoding: 'utf8' })
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(result.stdout)?.[1])
  const total = Number(/(\d+) requests in/.exec(result.stdout)?.[1])
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(result.stdout)?.[1] ?? 0)
  return { rps, total, non2xx }
}

const runs = Object.fromEntries(Object.keys(SETUPS).map((id) => [id, []]))
for (let rep = 0; rep < REPS; rep++) {
  const ids = Object.keys(SETUPS)
  const order = [...ids.slice(rep % ids.length), ...ids.slice(0, rep % ids.length)]
  for (const id of order) {
    const setup = await SETUPS[id](path.join(dir, `${id}-${rep}`))
    try {
      const status = await get(setup.url, { authorization: `Bearer ${token}` })
      if (status !== 200) throw new Error(`${id}: expected 200, got ${status}`)
      if (id !== 'nginx' && (await get(setup.url)) !== 401) throw new Error(`${id}: expected 401 without a token`)
      wrk(setup.url, 3)
      const before = setup.procs.map((proc) => cpuMicros(proc.pid))
      const result = wrk(setup.url, DURATION)
      const each = setup.procs.map((proc, i) => (cpuMicros(proc.pid) - before[i]) / result.total)
      runs[id].push({ ...result, cpu: each.reduce((a, b) => a + b, 0), each })
      console.error(`rep ${rep + 1} ${id.padEnd(9)} ${Math.round(result.rps)} req/s  ${each.map((x) => x.toFixed(1)).join(' + ')} µs/req  non-2xx ${result.non2xx}`)
    } finally {
      for (const proc of setup.procs) await proc.stop()
    }
  }
}
await upstream.stop()

console.log(`wrk -t1 -c${CONNECTIONS}, ${REPS} interleaved reps of ${DURATION} s; processes under test on CPU 0, wrk and the upstream on CPU 1; medians.\n`)
console.log('| setup | req/s | CPU µs/req (sum) | by process | ratio to nginx alone (req/s) |')
console.log('|---|---|---|---|---|')
for (const [id, list] of Object.entries(runs)) {
  const ratio = runs.nginx ? median(list.map((run, i) => run.rps / runs.nginx[i].rps)) : NaN
  console.log(`| ${id} | ${Math.round(median(list.map((r) => r.rps))).toLocaleString('en-US')} | ${median(list.map((r) => r.cpu)).toFixed(1)} | ${list[0].each.map((_, i) => median(list.map((r) => r.each[i])).toFixed(1)).join(' + ')} | ${ratio.toFixed(2)}× |`)
}
