/**
 * Operations (issue 6 items 1, 5, 7): the admin listener's health and readiness, hot reload (file
 * watch, SIGHUP, editors, ConfigMap symlink swaps, broken files, TLS certificates, load during reloads)
 * and graceful shutdown — against the real process (runPortcullis in-process, or the compiled CLI).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import https from 'node:https'
import net, { type AddressInfo } from 'node:net'
import tls from 'node:tls'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { describe, expect, it, type TestContext } from 'vitest'
import { stringify } from 'yaml'
import v8 from 'node:v8'
import { runPortcullis, type RunningPortcullis } from '../../src/server/run.js'
import { loadConfig } from '../../src/check/load.js'
import { CLI } from '../support/cli.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { createTestCa } from '../support/tls.js'
import { lineCollector } from '../support/logs.js'

interface Started {
  running: RunningPortcullis
  url: string
  adminUrl: string
  file: string
  logs: string[]
  write(config: Record<string, unknown>): void
}

function config(upstream: { url: string }, issuer: TestIssuer, scope = 'orders:read', extra: Record<string, unknown> = {}) {
  return {
    server: { listen: '127.0.0.1:0' },
    admin: { listen: '127.0.0.1:0' },
    upstreams: { main: { url: upstream.url, timeout: '5s' } },
    issuers: [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }],
    routes: [
      { id: 'orders', path: '/orders/**', upstream: 'main', scopes: { all: [scope] } },
      // The recording upstream answers /slow/… after 1.5 s.
      { id: 'slow', path: '/slow/**', upstream: 'main', scopes: { all: [scope] } },
    ],
    log: { level: 'info' },
    ...extra,
  }
}

async function start(context: TestContext, initial: Record<string, unknown>, options: { watch?: boolean; dir?: string } = {}): Promise<Started> {
  const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), 'portcullis-life-'))
  const file = path.join(dir, 'portcullis.yaml')
  const write = (next: Record<string, unknown>) => writeFileSync(file, stringify(next))
  write(initial)
  const { lines: logs, stream: logStream } = lineCollector()
  const running = await runPortcullis(file, { port: 0, adminPort: 0, watch: options.watch ?? true, logStream, auditStream: discard() })
  context.onTestFinished(() => running.shutdown('test'))
  const port = (running.gateway.server.address() as AddressInfo).port
  const adminPort = (running.admin!.server.address() as AddressInfo).port
  return { running, url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${adminPort}`, file, logs, write }
}

async function fixtures(context: TestContext): Promise<{ upstream: RecordingUpstream; issuer: TestIssuer }> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream({ slowMs: 1500 }), startTestIssuer()])
  context.onTestFinished(async () => { await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer }
}

/** The audit trail is test/audit/audit.test.ts's business; here it only must not go to stdout. */
const discard = () => new Writable({ write(_chunk, _encoding, callback) { callback() } })

async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const get = (url: string, token?: string) => fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} })

function metricValue(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{${labels}}`))
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1))
}

describe('admin listener', () => {
  it('serves /healthz, /readyz and /metrics, none of which exists on the public listener', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer))
    const health = await fetch(`${s.adminUrl}/healthz`)
    expect([health.status, await health.json()]).toEqual([200, { status: 'ok' }])
    await waitFor(async () => (await fetch(`${s.adminUrl}/readyz`)).status === 200)
    const metrics = await fetch(`${s.adminUrl}/metrics`)
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/)
    expect(await metrics.text()).toContain('portcullis_config_info{sha256="')
    for (const pathname of ['/metrics', '/healthz', '/readyz']) {
      const res = await get(`${s.url}${pathname}`)
      expect(res.status, pathname).toBe(404)
      expect(await res.text()).not.toContain('portcullis_')
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('/readyz is 503 naming the issuer whose keys were never fetched, and 200 once they are', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    issuer.setDown(true)
    const base = config(upstream, issuer)
    const s = await start(context, { ...base, issuers: [{ ...(base.issuers[0]!), jwks_cooldown: '1s' }] })
    await waitFor(() => issuer.jwksFetches >= 1)
    const down = await fetch(`${s.adminUrl}/readyz`)
    expect(down.status).toBe(503)
    expect(await down.json()).toEqual({ status: 'unavailable', reasons: [`keys of issuer ${issuer.issuer} not fetched yet`] })
    // /healthz says alive all the same: a liveness probe must not restart a process that only waits for an issuer.
    expect((await fetch(`${s.adminUrl}/healthz`)).status).toBe(200)
    issuer.setDown(false)
    await waitFor(async () => {
      await get(`${s.url}/orders/1`, await issuer.sign({ scope: 'orders:read' }))
      return (await fetch(`${s.adminUrl}/readyz`)).status === 200
    })
  })

  it('/readyz checks the embedded server\'s store', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-life-'))
    const port = await closedPort()
    const s = await start(context, {
      ...config(upstream, issuer),
      authorization_server: { enabled: true, issuer: `http://127.0.0.1:${port}`, store: { type: 'sqlite', path: 'store.db' } },
    }, { dir })
    await waitFor(async () => (await fetch(`${s.adminUrl}/readyz`)).status === 200)
    await s.running.gateway.authServer!.ctx.store.close()
    const res = await fetch(`${s.adminUrl}/readyz`)
    expect(res.status).toBe(503)
    expect(((await res.json()) as { reasons: string[] }).reasons[0]).toMatch(/^store unreachable/)
  })
})

describe('start', () => {
  it('promotes what the start built out of the young generation before serving, so no early scavenge copies it', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const base = config(upstream, issuer)
    const routes = [...(base.routes as object[]), ...Array.from({ length: 3_000 }, (_, i) => ({ id: `r${i}`, path: `/r${i}/{id}`, upstream: 'main', methods: ['GET', 'PUT'], scopes: { all: ['orders:read'] } }))]
    await start(context, { ...base, routes })
    // The young generation holds only what was allocated after the collection (the listen and this test's own).
    const young = v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')!
    expect(young.space_used_size).toBeLessThan(4 * 1024 * 1024)
  })
})

describe('hot reload', () => {
  it('a scope changed in the file applies to the next request, without a restart', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer, 'orders:read'))
    const token = await issuer.sign({ scope: 'orders:read' })
    expect((await get(`${s.url}/orders/1`, token)).status).toBe(200)
    s.write(config(upstream, issuer, 'orders:admin'))
    await waitFor(async () => (await get(`${s.url}/orders/1`, token)).status === 403)
    const scrape = await (await fetch(`${s.adminUrl}/metrics`)).text()
    expect(metricValue(scrape, 'portcullis_config_reloads_total', 'result="success"')).toBe(1)
    const reloaded = s.logs.map((line) => JSON.parse(line) as { msg: string; load_ms?: unknown; build_ms?: unknown })
      .find((entry) => entry.msg === 'config reloaded')
    // The line says how long the loader thread and the build on the event loop took.
    expect(reloaded).toMatchObject({ load_ms: expect.any(Number), build_ms: expect.any(Number) })
  })

  it('a change saved after `start` read the file and before its watch began is served: the file is read again once the watch is on', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-life-'))
    const file = path.join(dir, 'portcullis.yaml')
    // What `portcullis start` read and loaded (RunOptions.loaded), and the file as it is by the time the watch begins.
    const read = stringify(config(upstream, issuer, 'orders:read'))
    writeFileSync(file, stringify(config(upstream, issuer, 'orders:admin')))
    const { lines: logs, stream: logStream } = lineCollector()
    const running = await runPortcullis(file, {
      port: 0, adminPort: 0, logStream, auditStream: discard(), loaded: { text: read, config: loadConfig(file, read, {}) },
    })
    context.onTestFinished(() => running.shutdown('test'))
    const url = `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(() => logs.some((line) => line.includes('"msg":"config reloaded"')))
    expect((await get(`${url}/orders/1`, token)).status).toBe(403)
    expect(upstream.requests).toHaveLength(0)
  })

  it('a broken file keeps the old rules and the process, logs every error with file:line:col, and counts a failure', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer))
    const token = await issuer.sign({ scope: 'orders:read' })
    writeFileSync(s.file, 'upstreams:\n  main:\n    url: "ftp://nope"\nroutes: []\nbogus: 1\n')
    await waitFor(() => s.logs.some((line) => line.includes('config reload failed; keeping')))
    const errors = s.logs.filter((line) => line.includes('"msg":"config reload failed: ')).map((line) => (JSON.parse(line) as { msg: string }).msg)
    expect(errors.length).toBeGreaterThanOrEqual(3)
    for (const error of errors) expect(error).toMatch(new RegExp(`${s.file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+:\\d+ `))
    expect((await get(`${s.url}/orders/1`, token)).status).toBe(200)
    const scrape = await (await fetch(`${s.adminUrl}/metrics`)).text()
    expect(metricValue(scrape, 'portcullis_config_reloads_total', 'result="failure"')).toBe(1)
    expect(metricValue(scrape, 'portcullis_config_reloads_total', 'result="success"')).toBe(0)
  })

  it('an editor\'s write-then-rename and a Kubernetes ConfigMap ..data symlink swap are both picked up', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    // The ConfigMap layout: portcullis.yaml -> ..data/portcullis.yaml, ..data -> ..<timestamp>/.
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-cm-'))
    const version = (name: string, scope: string) => {
      mkdirSync(path.join(dir, name))
      writeFileSync(path.join(dir, name, 'portcullis.yaml'), stringify(config(upstream, issuer, scope)))
    }
    version('..v1', 'orders:read')
    symlinkSync('..v1', path.join(dir, '..data'))
    symlinkSync('..data/portcullis.yaml', path.join(dir, 'portcullis.yaml'))
    const { stream: logStream } = lineCollector()
    const running = await runPortcullis(path.join(dir, 'portcullis.yaml'), { port: 0, adminPort: 0, logStream, auditStream: discard() })
    context.onTestFinished(() => running.shutdown('test'))
    const url = `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`
    const read = await issuer.sign({ scope: 'orders:read' })
    expect((await get(`${url}/orders/1`, read)).status).toBe(200)
    version('..v2', 'orders:admin')
    symlinkSync('..v2', path.join(dir, '..data_tmp'))
    renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'))
    rmSync(path.join(dir, '..v1'), { recursive: true })
    await waitFor(async () => (await get(`${url}/orders/1`, read)).status === 403)
    // An editor: write a temporary file, then rename it over the config.
    const admin = await issuer.sign({ scope: 'orders:admin orders:read' })
    writeFileSync(path.join(dir, '.portcullis.yaml.swp'), stringify(config(upstream, issuer, 'orders:read')))
    renameSync(path.join(dir, '.portcullis.yaml.swp'), path.join(dir, 'portcullis.yaml'))
    await waitFor(async () => (await get(`${url}/orders/1`, read)).status === 200)
    expect((await get(`${url}/orders/1`, admin)).status).toBe(200)
  })

  it('an upstream URL changes: the next request goes to the new upstream', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const other = await startRecordingUpstream()
    context.onTestFinished(() => other.close())
    const s = await start(context, config(upstream, issuer), { watch: false })
    const token = await issuer.sign({ scope: 'orders:read' })
    expect((await get(`${s.url}/orders/1`, token)).status).toBe(200)
    s.write(config(other, issuer))
    expect(await s.running.reload()).toBe(true)
    expect((await get(`${s.url}/orders/2`, token)).status).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/orders/1'])
    expect(other.requests.map((request) => request.url)).toEqual(['/orders/2'])
  })

  it('an issuer added by a reload is trusted by the next request, and one removed is not', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const second = await startTestIssuer()
    context.onTestFinished(() => second.close())
    const s = await start(context, config(upstream, issuer), { watch: false })
    const token = await second.sign({ scope: 'orders:read' })
    expect((await get(`${s.url}/orders/1`, token)).status).toBe(401)
    const both = config(upstream, issuer)
    s.write({ ...both, issuers: [...both.issuers, { issuer: second.issuer, jwks_uri: second.jwksUri, audience: [second.audience], algorithms: ['ES256'] }] })
    expect(await s.running.reload()).toBe(true)
    expect((await get(`${s.url}/orders/1`, token)).status).toBe(200)
    s.write({ ...both, issuers: [{ issuer: second.issuer, jwks_uri: second.jwksUri, audience: [second.audience], algorithms: ['ES256'] }] })
    expect(await s.running.reload()).toBe(true)
    expect((await get(`${s.url}/orders/1`, await issuer.sign({ scope: 'orders:read' }))).status).toBe(401)
  })

  it('a request in flight finishes on the config it started with; the next one sees the new config', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer), { watch: false })
    const token = await issuer.sign({ scope: 'orders:read' })
    const inFlight = get(`${s.url}/slow/1`, token)
    await waitFor(() => upstream.requests.some((request) => request.url === '/slow/1'))
    // The route goes away, and the old upstream's pool with it.
    s.write({ ...config(upstream, issuer), routes: [{ id: 'other', path: '/other/**', upstream: 'main', auth: 'none' }] })
    expect(await s.running.reload()).toBe(true)
    expect((await get(`${s.url}/slow/2`, token)).status).toBe(404)
    const res = await inFlight
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ ok: true, url: '/slow/1' })
  })

  it('changes that need a restart are reported, and the rest is applied', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer), { watch: false })
    s.write({ ...config(upstream, issuer, 'orders:admin'), server: { listen: '127.0.0.1:1' } })
    expect(await s.running.reload()).toBe(true)
    const warning = s.logs.map((line) => JSON.parse(line) as { msg: string; keys?: string[] }).find((entry) => entry.msg.startsWith('config reloaded; these changes need a restart'))
    expect(warning?.keys).toEqual(['server.listen'])
    expect((await get(`${s.url}/orders/1`, await issuer.sign({ scope: 'orders:read' }))).status).toBe(403)
  })

  it('replaces the TLS certificate without a restart: new connections get the new one', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const ca = createTestCa()
    context.onTestFinished(() => ca.remove())
    const first = ca.issue('first')
    const second = ca.issue('second')
    const withTls = (cert: typeof first) => ({ ...config(upstream, issuer), server: { listen: '127.0.0.1:0', tls: { cert_file: cert.certFile, key_file: cert.keyFile } } })
    const s = await start(context, withTls(first), { watch: false })
    const port = (s.running.gateway.server.address() as AddressInfo).port
    const peer = () => new Promise<string>((resolve, reject) => {
      const request = https.get({ host: '127.0.0.1', port, path: '/orders/1', ca: ca.ca, agent: false }, (res) => {
        resolve(String((res.socket as import('node:tls').TLSSocket).getPeerCertificate().subject.CN))
        res.resume()
      })
      request.on('error', reject)
    })
    expect(await peer()).toBe('first')
    s.write(withTls(second))
    expect(await s.running.reload()).toBe(true)
    expect(await peer()).toBe('second')
    // A certificate file that cannot be read fails the reload, and the server keeps the one it has.
    s.write(withTls({ ...second, certFile: path.join(ca.dir, 'missing.crt') }))
    expect(await s.running.reload()).toBe(false)
    expect(await peer()).toBe('second')
  })

  it('drops no request during 20 reloads under a steady stream of requests: zero 5xx', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, config(upstream, issuer), { watch: false })
    const token = await issuer.sign({ scope: 'orders:read' })
    const statuses: number[] = []
    let reloading = true
    const client = async () => {
      while (reloading) statuses.push((await get(`${s.url}/orders/1`, token).catch(() => ({ status: 0 }))).status)
    }
    const clients = Array.from({ length: 8 }, client)
    for (let i = 0; i < 20; i++) {
      // Alternate a change that rebuilds the upstream pool with one that keeps it.
      s.write({ ...config(upstream, issuer), upstreams: { main: { url: upstream.url, timeout: i % 2 === 0 ? '4s' : '5s' } } })
      expect(await s.running.reload()).toBe(true)
      // Requests complete on the new runtime before the next reload.
      const seen = statuses.length
      await waitFor(() => statuses.length >= seen + 8)
    }
    reloading = false
    await Promise.all(clients)
    expect(statuses.length).toBeGreaterThanOrEqual(160)
    expect(statuses.filter((status) => status !== 200)).toEqual([])
  })
})

/** The compiled CLI as a child process, with its stdout lines. */
async function startCli(context: TestContext, text: string): Promise<{ child: ChildProcess; lines: string[]; exited: Promise<number | null> }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-cli-'))
  const file = path.join(dir, 'portcullis.yaml')
  writeFileSync(file, text)
  const child = spawn(process.execPath, [CLI, 'start', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH } })
  const lines: string[] = []
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => lines.push(...chunk.split('\n').filter((line) => line !== '')))
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => lines.push(...chunk.split('\n').filter((line) => line !== '')))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  context.onTestFinished(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  return { child, lines, exited }
}

/** A thread's nice value (Linux: field 19 of /proc/<pid>/task/<tid>/stat, proc(5)); undefined once it has ended. */
function threadNice(pid: number, tid: string): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])
  } catch { return undefined } // the thread ended meanwhile
}

describe('signals (the compiled CLI)', () => {
  /** The compiled CLI serving `config(...)` on a port of its own, once it answers. */
  async function servingCli(context: TestContext) {
    const { upstream, issuer } = await fixtures(context)
    const port = await closedPort()
    const base = { ...config(upstream, issuer), server: { listen: `127.0.0.1:${port}` }, admin: undefined }
    const { child, lines } = await startCli(context, stringify(base))
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/orders/1`, token).catch(() => ({ status: 0 }))).status === 200)
    return { child, lines, base, port, token }
  }

  it('SIGHUP reloads the file', async (context) => {
    const { child, lines, base, port, token } = await servingCli(context)
    const file = child.spawnargs.at(-1)!
    writeFileSync(file, stringify({ ...base, routes: [{ id: 'orders', path: '/orders/**', upstream: 'main', scopes: { all: ['orders:admin'] } }] }))
    child.kill('SIGHUP')
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/orders/1`, token)).status === 403)
    // The file watch may reload first; the signal reloads all the same, and says so.
    await waitFor(() => lines.some((line) => line.includes('"trigger":"SIGHUP"') && line.includes('"msg":"config reloaded"')))
  })

  it('SIGHUP with 1,300 routes: every route comes back from the worker thread (sent in pieces of 500) and is in service', async (context) => {
    const { child, lines, base, port, token } = await servingCli(context)
    const file = child.spawnargs.at(-1)!
    const routes = Array.from({ length: 1_300 }, (_, i) => ({ id: `r${i}`, path: `/r${i}/**`, upstream: 'main', scopes: { all: ['orders:read'] } }))
    writeFileSync(file, stringify({ ...base, routes }))
    child.kill('SIGHUP')
    await waitFor(() => lines.some((line) => line.includes('"trigger":"SIGHUP"') && line.includes('"msg":"config reloaded"')), 15_000)
    // The first and last route of every piece, and of every 250-route slice of the compile.
    for (const i of [0, 249, 250, 499, 500, 999, 1_000, 1_250, 1_299]) {
      const res = await get(`http://127.0.0.1:${port}/r${i}/x`, token)
      expect(res.status, `routes[${i}]`).toBe(200)
      expect(await res.json()).toMatchObject({ url: `/r${i}/x` })
    }
    expect((await get(`http://127.0.0.1:${port}/r1300/x`, token)).status).toBe(404)
    expect((await get(`http://127.0.0.1:${port}/orders/1`, token)).status).toBe(404)
  }, 30_000)

  it.runIf(process.platform === 'linux')('SIGHUP: the worker thread that parses the file runs at a lower priority (nice 10), the event loop at its own (Linux: /proc)', async (context) => {
    const { child, lines, base } = await servingCli(context)
    const file = child.spawnargs.at(-1)!
    const niceOf = (tid: string) => threadNice(child.pid!, tid)
    const threads = () => readdirSync(`/proc/${child.pid}/task`)
    const before = new Set(threads())
    expect(niceOf(String(child.pid))).toBe(0)
    // Long enough to parse that the thread is seen: 10,000 routes take about a second.
    const routes = Array.from({ length: 10_000 }, (_, i) => ({ id: `r${i}`, path: `/r${i}/**`, upstream: 'main' }))
    writeFileSync(file, stringify({ ...base, routes }))
    child.kill('SIGHUP')
    let seen: number | undefined
    await waitFor(() => {
      seen = threads().filter((tid) => !before.has(tid)).map(niceOf).find((nice) => nice === 10)
      return seen !== undefined || lines.some((line) => line.includes('"msg":"config reloaded"'))
    }, 15_000)
    expect(seen).toBe(10)
    expect(niceOf(String(child.pid))).toBe(0)
  }, 30_000)

  /** `portcullis start` with 1,200 routes (/a0/** …), serving, and the next reload's loader thread waiting (nice 10). */
  async function servingAhead(context: TestContext, extra: Record<string, unknown> = {}) {
    const { upstream, issuer } = await fixtures(context)
    const port = await closedPort()
    const base = { ...config(upstream, issuer), server: { listen: `127.0.0.1:${port}` }, admin: undefined, ...extra }
    const many = (count: number, prefix: string) => [
      ...base.routes,
      ...Array.from({ length: count }, (_, i) => ({ id: `${prefix}${i}`, path: `/${prefix}${i}/**`, upstream: 'main', scopes: { all: ['orders:read'] } })),
    ]
    const { child, lines, exited } = await startCli(context, stringify({ ...base, routes: many(1_200, 'a') }))
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/a7/x`, token).catch(() => ({ status: 0 }))).status === 200, 15_000)
    const waiting = () => readdirSync(`/proc/${child.pid}/task`).filter((tid) => threadNice(child.pid!, tid) === 10)
    await waitFor(() => waiting().length === 1, 15_000)
    return { child, lines, exited, base, many, port, token, file: child.spawnargs.at(-1)!, waiting, first: waiting()[0], upstream }
  }

  it.runIf(process.platform === 'linux')('from 1,000 routes the next reload\'s loader thread waits started (nice 10), the reload takes it and another waits after; below 1,000 none waits; SIGTERM with one waiting exits 0 (Linux: /proc)', async (context) => {
    const { child, lines, exited, base, many, port, token, file, waiting, first } = await servingAhead(context)
    const reloads = () => lines.filter((line) => line.includes('"trigger":"SIGHUP"') && line.includes('"msg":"config reloaded"')).length

    writeFileSync(file, stringify({ ...base, routes: many(1_300, 'b') }))
    child.kill('SIGHUP')
    await waitFor(() => reloads() === 1, 15_000)
    expect((await get(`http://127.0.0.1:${port}/b1299/x`, token)).status).toBe(200)
    expect((await get(`http://127.0.0.1:${port}/a7/x`, token)).status).toBe(404)
    // The thread that waited did the load and ended; a new one waits for the next.
    await waitFor(() => waiting().length === 1 && waiting()[0] !== first, 15_000)

    writeFileSync(file, stringify({ ...base, routes: many(10, 'c') }))
    child.kill('SIGHUP')
    await waitFor(() => reloads() === 2, 15_000)
    expect((await get(`http://127.0.0.1:${port}/c9/x`, token)).status).toBe(200)
    await waitFor(() => waiting().length === 0, 15_000)

    // Grown again, a thread waits; SIGTERM ends it with the rest, and the process exits 0.
    writeFileSync(file, stringify({ ...base, routes: many(1_100, 'd') }))
    child.kill('SIGHUP')
    await waitFor(() => reloads() === 3, 15_000)
    await waitFor(() => waiting().length === 1, 15_000)
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
  }, 60_000)

  it.runIf(process.platform === 'linux')('the loader thread reads the file: a watch event for the same text (a touch) reloads nothing and the waiting thread waits on; a removed file is reported unreadable and the config stays (Linux: /proc)', async (context) => {
    const { child, lines, port, token, file, waiting, first } = await servingAhead(context, { log: { level: 'debug' } })
    const said = (text: string) => lines.filter((line) => line.includes(text)).length

    const now = new Date()
    utimesSync(file, now, now)
    await waitFor(() => said('config file unchanged; nothing to reload') === 1, 15_000)
    expect(said('"msg":"config reloaded"')).toBe(0)
    // The thread read the file, found its digest in service, and waits on for the next load: no other is started
    // (one started meanwhile would be at nice 10 well within the second and a half).
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    expect(waiting()).toEqual([first])

    rmSync(file)
    child.kill('SIGHUP')
    await waitFor(() => lines.some((line) => line.includes('"trigger":"SIGHUP"') && line.includes(`config reload failed: cannot read ${file}`)), 15_000)
    expect((await get(`http://127.0.0.1:${port}/a7/x`, token)).status).toBe(200)
    expect(said('"msg":"config reloaded"')).toBe(0)
  }, 60_000)

  it.runIf(process.platform === 'linux')('a reload through the loader thread keeps unchanged routes, and a change beside them reaches them: a route\'s own scopes, then a scope_implies for all (Linux: /proc)', async (context) => {
    const { child, lines, base, many, port, token, file, upstream } = await servingAhead(context, { log: { level: 'debug' } })
    const reloads = () => lines.filter((line) => line.includes('"trigger":"SIGHUP"') && line.includes('"msg":"config reloaded"')).length
    const routes = many(1_200, 'a')
    const a5 = routes.findIndex((route) => route.id === 'a5')
    const writes = routes.map((route, i) => i === a5 ? { ...route, scopes: { all: ['orders:write'] } } : route)

    // The table builds since line `from`, each with how many rules it kept: the first is the write's (the watch's reload
    // or the SIGHUP's, whichever ran first; the other, of the same file, keeps every rule).
    const builds = (from: number) => lines.slice(from).filter((line) => line.includes('rules of unchanged routes kept'))
      .map((line) => JSON.parse(line) as { routes: number; kept: number })
    let from = lines.length
    writeFileSync(file, stringify({ ...base, routes: writes }))
    child.kill('SIGHUP')
    await waitFor(() => reloads() === 1, 15_000)
    // The routes of the start's config were keyed while serving: every rule but the changed one's is kept.
    expect(builds(from)[0]).toEqual(expect.objectContaining({ routes: routes.length, kept: routes.length - 1 }))
    const reached = upstream.requests.length
    expect((await get(`http://127.0.0.1:${port}/a5/x`, token)).status).toBe(403)
    expect(upstream.requests.length).toBe(reached)
    expect((await get(`http://127.0.0.1:${port}/a7/x`, token)).status).toBe(200)

    // Every route as it is in service; what they depend on changed: orders:read now implies orders:write.
    from = lines.length
    writeFileSync(file, stringify({ ...base, scope_implies: { 'orders:read': ['orders:write'] }, routes: writes }))
    child.kill('SIGHUP')
    await waitFor(() => reloads() === 2, 15_000)
    expect(builds(from)[0]).toEqual(expect.objectContaining({ routes: routes.length, kept: 0 }))
    expect((await get(`http://127.0.0.1:${port}/a5/x`, token)).status).toBe(200)
    expect((await get(`http://127.0.0.1:${port}/a1199/x`, token)).status).toBe(200)
  }, 60_000)

  it('SIGHUP with a broken file: the worker thread\'s problems are logged with file:line:col, and the config in service stays', async (context) => {
    const { child, lines, base, port, token } = await servingCli(context)
    const file = child.spawnargs.at(-1)!
    writeFileSync(file, stringify({ ...base, routes: [{ id: 'orders', path: '/orders/**', upstream: 'nowhere' }] }))
    child.kill('SIGHUP')
    await waitFor(() => lines.some((line) => line.includes('config reload failed') && /portcullis\.yaml:\d+:\d+ +routes\[0\]\.upstream: unknown upstream/.test(line)))
    expect((await get(`http://127.0.0.1:${port}/orders/1`, token)).status).toBe(200)
  })

  it('SIGTERM with a slow request in flight lets it finish, then exits 0', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const port = await closedPort()
    const { child, exited } = await startCli(context, stringify({ ...config(upstream, issuer), server: { listen: `127.0.0.1:${port}` }, admin: undefined }))
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/orders/1`, token).catch(() => ({ status: 0 }))).status === 200)
    const slow = get(`http://127.0.0.1:${port}/slow/1`, token)
    await waitFor(() => upstream.requests.some((request) => request.url === '/slow/1'))
    child.kill('SIGTERM')
    const res = await slow
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ url: '/slow/1' })
    expect(await exited).toBe(0)
    // Nothing accepts connections any more.
    await expect(get(`http://127.0.0.1:${port}/orders/1`, token)).rejects.toThrow()
  })

  it('a request slower than server.shutdown_timeout is cut at the timeout, and the process still exits 0', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const port = await closedPort()
    const { child, exited, lines } = await startCli(context, stringify({
      ...config(upstream, issuer), server: { listen: `127.0.0.1:${port}`, shutdown_timeout: '300ms' }, admin: undefined,
    }))
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/orders/1`, token).catch(() => ({ status: 0 }))).status === 200)
    const slow = get(`http://127.0.0.1:${port}/slow/1`, token).then((res) => res.status, () => 'cut')
    await waitFor(() => upstream.requests.some((request) => request.url === '/slow/1'))
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
    // The upstream would have answered 200: the connection was closed at the timeout instead.
    expect(await slow).toBe('cut')
    expect(lines.some((line) => line.includes('shutdown timeout'))).toBe(true)
  })
})

describe('issue 15 item 11: shutdown waits only for requests in flight (the compiled CLI)', () => {
  /** The CLI on a known port, having served one request; `stop` sends SIGTERM and times the way out. */
  async function serving(context: TestContext) {
    const { upstream, issuer } = await fixtures(context)
    const port = await closedPort()
    const cli = await startCli(context, stringify({ ...config(upstream, issuer), server: { listen: `127.0.0.1:${port}` }, admin: undefined }))
    const token = await issuer.sign({ scope: 'orders:read' })
    await waitFor(async () => (await get(`http://127.0.0.1:${port}/orders/1`, token).catch(() => ({ status: 0 }))).status === 200)
    const stop = async () => {
      const sent = Date.now()
      cli.child.kill('SIGTERM')
      const code = await cli.exited
      const exitedMs = Date.now() - sent
      const done = cli.lines.map((line) => JSON.parse(line) as { msg?: string; time?: number }).find((entry) => entry.msg === 'shut down')
      // `drainedMs` is ours (SIGTERM to the 'shut down' line); `exitedMs` adds node's own teardown, up to ~1 s on a busy machine.
      return { code, drainedMs: done?.time === undefined ? Infinity : done.time - sent, exitedMs }
    }
    return { upstream, port, token, stop }
  }

  /** A TCP connection that has sent nothing, as a browser's preconnect; resolves once connected. */
  async function openSocket(port: number): Promise<{ socket: net.Socket; closed: Promise<number> }> {
    const socket = net.connect(port, '127.0.0.1')
    socket.on('error', () => {})
    const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now())))
    await new Promise((resolve) => socket.once('connect', resolve))
    return { socket, closed }
  }

  /** GET over a keep-alive agent: the connection stays open, idle, in the agent's pool afterwards. */
  function keepAliveGet(agent: http.Agent, port: number, pathname: string, token: string) {
    return new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
      http.get({ host: '127.0.0.1', port, path: pathname, agent, headers: { authorization: `Bearer ${token}` } }, (res) => {
        let body = ''
        res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk })
        res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body }))
      }).on('error', reject)
    })
  }

  it('a connection that never sent a request does not hold SIGTERM: shut down within 1 s, exit 0', async (context) => {
    const s = await serving(context)
    const idle = await openSocket(s.port)
    context.onTestFinished(() => { idle.socket.destroy() })
    const { code, drainedMs, exitedMs } = await s.stop()
    expect(code).toBe(0)
    expect(drainedMs).toBeLessThan(1000)
    expect(exitedMs).toBeLessThan(3000)
  })

  it('an idle keep-alive connection does not hold SIGTERM: shut down within 1 s, exit 0', async (context) => {
    const s = await serving(context)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    context.onTestFinished(() => agent.destroy())
    const first = await keepAliveGet(agent, s.port, '/orders/1', s.token)
    expect([first.status, first.connection]).toEqual([200, 'keep-alive'])
    expect(Object.values(agent.freeSockets).flat()).toHaveLength(1)
    const { code, drainedMs, exitedMs } = await s.stop()
    expect(code).toBe(0)
    expect(drainedMs).toBeLessThan(1000)
    expect(exitedMs).toBeLessThan(3000)
  })

  it('with TLS, neither an idle TLS connection nor a TCP connection still before its handshake holds the shutdown', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const ca = createTestCa()
    context.onTestFinished(() => ca.remove())
    const cert = ca.issue('gateway', ['IP:127.0.0.1'])
    const s = await start(context, { ...config(upstream, issuer), server: { listen: '127.0.0.1:0', tls: { cert_file: cert.certFile, key_file: cert.keyFile } } }, { watch: false })
    const port = (s.running.gateway.server.address() as AddressInfo).port
    const secure = tls.connect({ host: '127.0.0.1', port, ca: ca.ca })
    const bare = await openSocket(port)
    context.onTestFinished(() => { secure.destroy(); bare.socket.destroy() })
    secure.on('error', () => {})
    await new Promise((resolve) => secure.once('secureConnect', resolve))
    const started = Date.now()
    await s.running.shutdown('test')
    expect(Date.now() - started).toBeLessThan(1000)
    await bare.closed
  })

  it('HTTP/2: an idle session gets GOAWAY and closes at once, a stream in flight finishes with 200 on its own', async (context) => {
    const { upstream, issuer } = await fixtures(context)
    const s = await start(context, { ...config(upstream, issuer), server: { listen: '127.0.0.1:0', http2: { cleartext: true } } }, { watch: false })
    const url = `http://127.0.0.1:${(s.running.gateway.server.address() as AddressInfo).port}`
    const token = await issuer.sign({ scope: 'orders:read' })
    const idle = http2.connect(url)
    const busy = http2.connect(url)
    for (const session of [idle, busy]) { session.on('error', () => {}); context.onTestFinished(() => { session.destroy() }) }
    await Promise.all([idle, busy].map((session) => new Promise((resolve) => session.once('remoteSettings', resolve))))
    const idleGoaway = new Promise<number>((resolve) => idle.once('goaway', (code: number) => resolve(code)))
    const idleClosed = new Promise<number>((resolve) => idle.once('close', () => resolve(Date.now())))
    const stream = busy.request({ ':path': '/slow/1', authorization: `Bearer ${token}` })
    const answer = new Promise<{ status: number; body: string; at: number }>((resolve, reject) => {
      let status = 0
      let body = ''
      stream.setEncoding('utf8')
      stream.on('response', (headers) => { status = Number(headers[':status']) })
      stream.on('data', (chunk: string) => { body += chunk })
      stream.on('end', () => resolve({ status, body, at: Date.now() }))
      stream.on('error', reject)
    })
    await waitFor(() => upstream.requests.some((request) => request.url === '/slow/1'))
    const stopped = s.running.shutdown('test')
    // RFC 9113 §6.8: NO_ERROR, the streams already open are still answered.
    expect(await idleGoaway).toBe(http2.constants.NGHTTP2_NO_ERROR)
    const res = await answer
    expect(res.status).toBe(200)
    expect(JSON.parse(res.body)).toMatchObject({ url: '/slow/1' })
    expect(await idleClosed).toBeLessThan(res.at)
    await stopped
  })

  it('a request in flight finishes with 200 and Connection: close while idle connections close at once; then exit 0', async (context) => {
    const s = await serving(context)
    const agent = new http.Agent({ keepAlive: true })
    context.onTestFinished(() => agent.destroy())
    const idle = await openSocket(s.port)
    context.onTestFinished(() => { idle.socket.destroy() })
    const slow = keepAliveGet(agent, s.port, '/slow/1', s.token).then((res) => ({ ...res, at: Date.now() }))
    await waitFor(() => s.upstream.requests.some((request) => request.url === '/slow/1'))
    const stopped = s.stop()
    const res = await slow
    expect(res.status).toBe(200)
    expect(JSON.parse(res.body)).toMatchObject({ url: '/slow/1' })
    // RFC 9112 §9.6: the client learns the connection ends here, and does not send another request on it.
    expect(res.connection).toBe('close')
    expect(await idle.closed).toBeLessThan(res.at)
    expect((await stopped).code).toBe(0)
    expect(Date.now() - res.at).toBeLessThan(3000)
  })

  it('a shutdown during an Expect: 100-continue request (the connection\'s first) drains it: 200 with Connection: close, then exit 0', async (context) => {
    const s = await serving(context)
    const body = 'x'.repeat(1000)
    // A connection of its own whose first request expects 100: such a request comes to the server as
    // 'checkContinue', not 'request', and must count as one in flight, not as a connection that sent nothing.
    const slow = new Promise<{ status: number; connection: string | undefined; body: string; continued: boolean; at: number }>((resolve, reject) => {
      let continued = false
      const req = http.request({
        host: '127.0.0.1', port: s.port, path: '/slow/1', method: 'PUT', agent: false,
        headers: { authorization: `Bearer ${s.token}`, expect: '100-continue', 'content-type': 'text/plain', 'content-length': body.length },
      }, (res) => {
        let text = ''
        res.setEncoding('utf8').on('data', (chunk: string) => { text += chunk })
        res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body: text, continued, at: Date.now() }))
      })
      req.on('continue', () => { continued = true; req.end(body) })
      req.on('error', reject)
    })
    await waitFor(() => s.upstream.requests.some((request) => request.url === '/slow/1' && request.method === 'PUT'))
    const stopped = s.stop()
    const res = await slow
    expect(res.continued).toBe(true)
    expect(res.status).toBe(200)
    expect(JSON.parse(res.body)).toMatchObject({ url: '/slow/1', bodyBytes: 1000 })
    expect(res.connection).toBe('close')
    expect((await stopped).code).toBe(0)
  })
})
