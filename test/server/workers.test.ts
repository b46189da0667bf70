/**
 * Issue 24, `server.workers: 2`: `portcullis start` (the built CLI) as a primary and two workers on one port,
 * with the embedded authorization server on SQLite. Which worker served a request is read from its log line
 * (pino's `pid`, found by the request id the test sends). Connections are new for every request, so that
 * the OS can hand each to either worker.
 */
import { scryptSync, randomBytes } from 'node:crypto'
import http from 'node:http'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { CLI, portcullis, spawnProcess, waitFor, type RunningProcess } from '../support/cli.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { parsePrometheusText } from '../support/prometheus.js'
import { PROMTOOL, PROMTOOL_SKIPPED, promtoolCheck } from '../support/promtool.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { createHash, generateKeyPairSync, randomUUID } from 'node:crypto'
import { calculateJwkThumbprint, exportJWK, SignJWT } from 'jose'
import { YOUNG_GENERATION_FLAG, youngGenerationPays } from '../../src/server/young-generation.js'

const PASSWORD = 'worker-test-password'
const SALT = randomBytes(16)
// A deliberately cheap scrypt (N = 16): 200 logins must not take 200 × 50 ms.
const PASSWORD_HASH = `scrypt$4$8$1$${SALT.toString('base64url')}$${scryptSync(PASSWORD, SALT, 32, { N: 16, r: 8, p: 1 }).toString('base64url')}`
const SERVICE = { id: 'svc', secret: 'svc-secret-0123456789abcdef' }
const APP = { id: 'app', secret: 'app-secret-0123456789abcdef' }

interface Answer { status: number; body: string; id: string }

let counter = 0
type RequestOptions = { method?: string; headers?: Record<string, string>; body?: string }

/** One request, with a request id to find its log line by: on `agent`'s kept-alive connection, or (false) a new one. */
function send(url: string, options: RequestOptions, agent: http.Agent | false): Promise<Answer> {
  const id = `w-${process.pid}-${++counter}`
  const headers = { 'x-request-id': id, ...(agent === false && { connection: 'close' }), ...options.headers }
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method ?? 'GET', agent, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, body, id }))
    })
    req.on('error', reject)
    req.end(options.body)
  })
}
/** On a connection of its own: the OS hands each to either worker. */
const fresh = (url: string, options: RequestOptions = {}) => send(url, options, false)
/** On `agent`'s one kept-alive connection: always the same worker. */
const onAgent = (agent: http.Agent, url: string, options: RequestOptions = {}) => send(url, options, agent)

/** Two kept-alive connections, one to each worker (known by the pid that logged a request made on each). */
async function agentsOnBothWorkers(c: Cluster): Promise<Map<number, http.Agent>> {
  const byPid = new Map<number, http.Agent>()
  for (let i = 0; i < 40 && byPid.size < 2; i++) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const probe = await onAgent(agent, `${c.url}/api/probe`)
    await new Promise((resolve) => setTimeout(resolve, 50))
    const pid = c.pidOf(probe.id)
    if (pid !== undefined && !byPid.has(pid)) byPid.set(pid, agent)
    else agent.destroy()
  }
  if (byPid.size < 2) throw new Error('40 connections, all to one worker')
  return byPid
}

/** `own`, a cluster of one test's own, with a kept-alive connection to each of its workers; both closed after `body`. */
async function onBothWorkersOf(own: Cluster, body: (agents: http.Agent[]) => Promise<void>): Promise<void> {
  let byPid = new Map<number, http.Agent>()
  try {
    byPid = await agentsOnBothWorkers(own)
    await body([...byPid.values()])
  } finally {
    for (const agent of byPid.values()) agent.destroy()
    own.process.kill()
    await own.process.exited
  }
}

const form = (fields: Record<string, string>) => ({
  method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString(),
})
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`

interface Cluster {
  process: RunningProcess
  url: string
  admin: string
  file: string
  config: Record<string, unknown>
  /** The pid that served the request with this id (from its log line), or undefined. */
  pidOf(id: string): number | undefined
  /** Worker pids the primary reported started, in order. */
  started(): number[]
  /** The pids whose log has a fastify request line for `url` (the authorization server's own requests). */
  servedBy(url: string): Set<number>
}

async function startCluster(upstream: RecordingUpstream, throttling?: Record<string, unknown>, issuer?: TestIssuer,
  extra: Record<string, unknown> = {}): Promise<Cluster> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-workers-'))
  const [port, adminPort, decisionPort] = await Promise.all([closedPort(), closedPort(), closedPort()])
  const url = `http://127.0.0.1:${port}`
  const config: Record<string, unknown> = {
    server: { listen: `127.0.0.1:${port}`, workers: 2, shutdown_timeout: '5s', public_url: url },
    admin: { listen: `127.0.0.1:${adminPort}` },
    upstreams: { main: { url: upstream.url, timeout: '5s' } },
    routes: [
      { id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['items:read'] } },
      { id: 'slow', path: '/slow/**', upstream: 'main', scopes: { all: ['items:read'] } },
    ],
    authorization_server: {
      enabled: true,
      issuer: url,
      store: { type: 'sqlite', path: path.join(dir, 'portcullis.db') },
      clients: [
        { client_id: SERVICE.id, client_secret: SERVICE.secret, grant_types: ['client_credentials'], scopes: ['items:read', 'items:write'] },
        { client_id: APP.id, client_secret: APP.secret, token_endpoint_auth_method: 'client_secret_post', first_party: true,
          grant_types: ['password', 'refresh_token'], scopes: ['items:read'] },
      ],
      users: [{ username: 'alice', password_hash: PASSWORD_HASH }],
      // Attempts in flight count until they succeed: 200 logins at once need room.
      throttling: { failures_per_client: 1000, failures_per_ip: 100000 },
    },
    decision: { listen: `127.0.0.1:${decisionPort}` },
    log: { level: 'info' },
  }
  if (throttling) Object.assign(config.authorization_server as Record<string, unknown>, { throttling })
  if (issuer) config.issuers = [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }]
  // `server` and `authorization_server` in `extra` are merged into the ones above; anything else replaces its key.
  const { server, authorization_server: authorizationServer, ...rest } = extra
  Object.assign(config.server as Record<string, unknown>, server)
  Object.assign(config.authorization_server as Record<string, unknown>, authorizationServer)
  Object.assign(config, rest)
  const file = path.join(dir, 'portcullis.yaml')
  writeFileSync(file, stringify(config))
  const running = spawnProcess(process.execPath, [CLI, 'start', '--config', file])
  const lines = () => running.output().stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, unknown>)
  await waitFor('two workers started', async () => {
    if (running.child.exitCode !== null) throw new Error(`exited: ${running.output().stderr}${running.output().stdout}`)
    return lines().some((line) => line.msg === 'all workers started')
  }, 30_000)
  return {
    process: running,
    url,
    admin: `http://127.0.0.1:${adminPort}`,
    file,
    config,
    pidOf: (id) => lines().find((line) => line.reqId === id)?.pid as number | undefined,
    started: () => lines().filter((line) => line.msg === 'worker started').map((line) => line.pid as number),
    servedBy: (target) => new Set(lines().filter((line) => (line.req as { url?: string } | undefined)?.url === target).map((line) => line.pid as number)),
  }
}

/** Requests in parallel batches on fresh connections until both workers have answered one; their answers. */
async function fromBoth(c: Cluster, send: () => Promise<Answer>, rounds = 20): Promise<Answer[]> {
  const answers: Answer[] = []
  for (let round = 0; round < rounds; round++) {
    answers.push(...await Promise.all(Array.from({ length: 10 }, send)))
    // The log line is written when the response ends: give the pipe a moment.
    await new Promise((resolve) => setTimeout(resolve, 50))
    if (new Set(answers.map((answer) => c.pidOf(answer.id)).filter((pid) => pid !== undefined)).size >= 2) return answers
  }
  throw new Error(`one worker answered all ${answers.length} requests`)
}
const pidsOf = (c: Cluster, answers: Answer[]) => new Set(answers.map((answer) => c.pidOf(answer.id)).filter((pid) => pid !== undefined))

async function serviceToken(c: Cluster, scope = 'items:read'): Promise<string> {
  const res = await fresh(`${c.url}/token`, { ...form({ grant_type: 'client_credentials', scope }), headers: { ...form({}).headers, authorization: basic(SERVICE.id, SERVICE.secret) } })
  expect(res.status).toBe(200)
  return (JSON.parse(res.body) as { access_token: string }).access_token
}

describe('server.workers: 2', () => {
  let upstream: RecordingUpstream
  let issuer: TestIssuer
  let c: Cluster
  beforeAll(async () => {
    ;[upstream, issuer] = await Promise.all([startRecordingUpstream({ slowMs: 600 }), startTestIssuer()])
    c = await startCluster(upstream, undefined, issuer)
  }, 60_000)
  afterAll(async () => {
    c?.process.kill()
    await c?.process.exited
    await Promise.all([upstream?.close(), issuer?.close()])
  })

  it('two workers serve one port, each with the same answers', async () => {
    const token = await serviceToken(c)
    const answers = await fromBoth(c, () => fresh(`${c.url}/api/items/1`, { headers: { authorization: `Bearer ${token}` } }))
    expect(answers.every((answer) => answer.status === 200)).toBe(true)
    expect(pidsOf(c, answers).size).toBe(2)
    expect(pidsOf(c, answers).has(c.process.child.pid!)).toBe(false)
  })

  it('the workers run with the young generation size where it pays (young-generation.ts), the primary as it was started', async () => {
    const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
    const workers = c.started()
    expect(workers.length).toBeGreaterThanOrEqual(2)
    const given = youngGenerationPays(process.version)
    for (const pid of workers) expect(argvOf(pid).includes(YOUNG_GENERATION_FLAG)).toBe(given)
    expect(argvOf(c.process.child.pid!)).not.toContain(YOUNG_GENERATION_FLAG)
  })

  it.skipIf(PROMTOOL === undefined)(`the primary's aggregated /metrics passes promtool check metrics${PROMTOOL === undefined ? ` (${PROMTOOL_SKIPPED})` : ''}`, async () => {
    await fromBoth(c, () => fresh(`${c.url}/api/items/3`))
    const text = await (await fetch(`${c.admin}/metrics`)).text()
    expect(new Set(parsePrometheusText(text).samples.filter((sample) => sample.name === 'portcullis_nodejs_active_handles_all')
      .map((sample) => sample.labels.worker))).toEqual(new Set(['1', '2']))
    const { status, output } = promtoolCheck(text)
    expect(output).toBe('')
    expect(status).toBe(0)
  })

  it('one /metrics scrape on the primary counts the requests of both, process metrics per worker', async () => {
    const before = parsePrometheusText(await (await fetch(`${c.admin}/metrics`)).text())
    const count = (scrape: ReturnType<typeof parsePrometheusText>) => scrape.samples
      .filter((sample) => sample.name === 'portcullis_requests_total' && sample.labels.route === 'api' && sample.labels.status === '401')
      .reduce((sum, sample) => sum + sample.value, 0)
    const answers = await fromBoth(c, () => fresh(`${c.url}/api/items/2`))
    const after = parsePrometheusText(await (await fetch(`${c.admin}/metrics`)).text())
    expect(count(after) - count(before)).toBe(answers.length)
    const workers = new Set(after.samples.filter((sample) => sample.name === 'portcullis_process_cpu_user_seconds_total').map((sample) => sample.labels.worker))
    expect(workers).toEqual(new Set(['1', '2']))
    const ready = await fetch(`${c.admin}/readyz`)
    expect(ready.status).toBe(200)
  })

  it('a token revoked through one worker is refused by the other within 1 s', async () => {
    const token = await serviceToken(c)
    // Both workers hold it verified in their caches.
    await fromBoth(c, () => fresh(`${c.url}/api/items/3`, { headers: { authorization: `Bearer ${token}` } }))
    const revoked = await fresh(`${c.url}/revoke`, { ...form({ token }), headers: { ...form({}).headers, authorization: basic(SERVICE.id, SERVICE.secret) } })
    expect(revoked.status).toBe(200)
    const at = Date.now()
    const before = upstream.requests.length
    await waitFor('every worker to refuse the revoked token', async () => {
      const answers = await Promise.all(Array.from({ length: 10 }, () => fresh(`${c.url}/api/items/3`, { headers: { authorization: `Bearer ${token}` } })))
      return answers.every((answer) => answer.status === 401)
    }, 3000)
    expect(Date.now() - at).toBeLessThan(1000)
    const after = await fromBoth(c, () => fresh(`${c.url}/api/items/3`, { headers: { authorization: `Bearer ${token}` } }))
    expect(after.every((answer) => answer.status === 401)).toBe(true)
    // Nothing after the waiting reached the upstream.
    const forwardedSince = upstream.requests.slice(before).filter((request) => request.url === '/api/items/3').length
    expect(forwardedSince).toBeLessThanOrEqual(10)
  })

  it('a DPoP proof accepted by one worker is refused by the other', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const jwk = await exportJWK(publicKey)
    const token = await issuer.sign({ scope: 'items:read', cnf: { jkt: await calculateJwkThumbprint(jwk) } })
    const proof = () => new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), htm: 'GET', htu: `${c.url}/api/dpop`,
      ath: createHash('sha256').update(token).digest('base64url') }).setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk }).sign(privateKey)
    const agents = await agentsOnBothWorkers(c)
    try {
      const [a, b] = [...agents.values()]
      const send = (agent: http.Agent, dpop: string) => onAgent(agent, `${c.url}/api/dpop`, { headers: { authorization: `DPoP ${token}`, dpop } })
      const once = await proof()
      expect((await send(a!, once)).status).toBe(200)
      const replayed = await send(b!, once)
      expect(replayed.status).toBe(401)
      expect(replayed.body).toContain('invalid_dpop_proof')
      expect((await send(b!, await proof())).status).toBe(200)
    } finally {
      for (const agent of agents.values()) agent.destroy()
    }
  })

  it('dpop.nonce without nonce_secret: a nonce one worker issued is accepted by the other', async () => {
    const nonced = await startCluster(upstream, undefined, issuer, { dpop: { nonce: true } })
    const agents = await agentsOnBothWorkers(nonced).catch(async (error: unknown) => {
      nonced.process.kill()
      throw error
    })
    try {
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
      const jwk = await exportJWK(publicKey)
      const token = await issuer.sign({ scope: 'items:read', cnf: { jkt: await calculateJwkThumbprint(jwk) } })
      const proof = (nonce?: string) => new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), htm: 'GET', htu: `${nonced.url}/api/dpop`,
        ath: createHash('sha256').update(token).digest('base64url'), ...(nonce !== undefined && { nonce }) })
        .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk }).sign(privateKey)
      const send = (agent: http.Agent, dpop: string) => new Promise<{ status: number; nonce: string | undefined }>((resolve, reject) => {
        const req = http.request(`${nonced.url}/api/dpop`, { agent, headers: { authorization: `DPoP ${token}`, dpop } }, (res) => {
          res.resume()
          res.on('end', () => resolve({ status: res.statusCode!, nonce: res.headers['dpop-nonce'] as string | undefined }))
        })
        req.on('error', reject)
        req.end()
      })
      const [a, b] = [...agents.values()]
      const pairs: Array<[http.Agent, http.Agent]> = [[a!, b!], [b!, a!]]
      for (const [issuing, using] of pairs) {
        const asked = await send(issuing, await proof())
        expect(asked.status).toBe(401)
        expect(asked.nonce).toBeDefined()
        expect((await send(using, await proof(asked.nonce))).status).toBe(200)
      }
    } finally {
      for (const agent of agents.values()) agent.destroy()
      nonced.process.kill()
      await nonced.process.exited
    }
  }, 60_000)

  it('brute force spread over both workers is counted once', async () => {
    const small = await startCluster(upstream, { failures_per_client: 4, failures_per_ip: 100000 })
    await onBothWorkersOf(small, async (agents) => {
      const attempt = (agent: http.Agent) => onAgent(agent, `${small.url}/token`, {
        ...form({ grant_type: 'client_credentials' }), headers: { ...form({}).headers, authorization: basic(SERVICE.id, 'wrong-secret-000000000') },
      })
      // Three wrong secrets on each worker: each alone would allow all three (4 per client); counted together, 4 only.
      const statuses: number[] = []
      for (let round = 0; round < 3; round++) for (const agent of agents) statuses.push((await attempt(agent)).status)
      expect(statuses.filter((status) => status === 401)).toHaveLength(4)
      expect(statuses.filter((status) => status === 429)).toHaveLength(2)
    })
  }, 60_000)

  for (const workers of [2, 'auto'] as const) {
    const cpus = availableParallelism()
    it.skipIf(workers === 'auto' && cpus < 2)(`a rate limit with the memory store is one budget for all the workers (workers: ${workers}${workers === 'auto' ? `, ${cpus} CPUs here` : ''}): 5 per 10 s admits 5 of 30, whichever worker serves them`, async () => {
      const limited = await startCluster(upstream, undefined, undefined, {
        server: { workers },
        routes: [...c.config.routes as unknown[], { id: 'open', path: '/open/**', upstream: 'main', auth: 'none' }],
        rate_limits: { policies: { 'per-address': { limit: 5, window: '10s', key: 'address' } }, default: ['per-address'] },
      })
      await onBothWorkersOf(limited, async (agents) => {
        const before = upstream.requests.filter((request) => request.url.startsWith('/open/')).length
        const statuses: number[] = []
        for (let round = 0; round < 15; round++) for (const agent of agents) statuses.push((await onAgent(agent, `${limited.url}/open/${round}`)).status)
        expect(statuses.filter((status) => status === 200)).toHaveLength(5)
        expect(statuses.filter((status) => status === 429)).toHaveLength(25)
        expect(upstream.requests.filter((request) => request.url.startsWith('/open/')).length - before).toBe(5)
      })
    }, 60_000)
  }

  it('keys rotate on SQLite: every worker signs with the new key once it is published, and accepts the old one\'s tokens meanwhile', async () => {
    const rotating = await startCluster(upstream, undefined, undefined, { authorization_server: { signing: { rotation_publish_delay: '2s' } } })
    // One kept-alive connection to each worker: what each signs and accepts, worker by worker.
    await onBothWorkersOf(rotating, async (agents) => {
      const tokenFrom = (agent: http.Agent) => onAgent(agent, `${rotating.url}/token`, { ...form({ grant_type: 'client_credentials', scope: 'items:read' }), headers: { ...form({}).headers, authorization: basic(SERVICE.id, SERVICE.secret) } })
      const kidOf = (answer: Answer) => JSON.parse(Buffer.from((JSON.parse(answer.body) as { access_token: string }).access_token.split('.')[0]!, 'base64url').toString()).kid as string
      const before = await Promise.all(agents.map(tokenFrom))
      const oldKids = new Set(before.map(kidOf))
      expect(oldKids.size).toBe(1)
      const oldTokens = before.map((answer) => (JSON.parse(answer.body) as { access_token: string }).access_token)
      const rotated = await portcullis(['keys', 'rotate', '--config', rotating.file])
      expect(rotated.code, rotated.stderr).toBe(0)
      // Each worker re-reads the store every 30 s; then, 2 s after the rotation, the new key signs.
      await waitFor('both workers to sign with the new key', async () => {
        const answers = await Promise.all(agents.map(tokenFrom))
        return answers.every((answer) => answer.status === 200 && !oldKids.has(kidOf(answer)))
      }, 45_000)
      const after = await Promise.all(agents.map(tokenFrom))
      expect(new Set(after.map(kidOf)).size).toBe(1)
      // The old key's tokens, issued before by either worker, are still accepted by both until the key retires.
      for (const agent of agents) {
        for (const token of oldTokens) expect((await onAgent(agent, `${rotating.url}/api/items/1`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
      }
    })
  }, 90_000)

  it('right secrets sent at once over both workers are never refused: 50 parallel client_credentials, allowance 4', async () => {
    const small = await startCluster(upstream, { failures_per_client: 4, failures_per_ip: 100000 })
    try {
      // Each on a connection of its own, handed to either worker.
      const answers = await Promise.all(Array.from({ length: 50 }, () => fresh(`${small.url}/token`, {
        ...form({ grant_type: 'client_credentials' }), headers: { ...form({}).headers, authorization: basic(SERVICE.id, SERVICE.secret) },
      })))
      expect(answers.map((answer) => answer.status)).toEqual(Array(50).fill(200))
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect(small.servedBy('/token').size).toBe(2)
    } finally {
      small.process.kill()
      await small.process.exited
    }
  }, 60_000)

  it('200 refresh chains over SQLite on both workers at once: none lost, no 500', async () => {
    const login = () => fresh(`${c.url}/token`, form({ grant_type: 'password', username: 'alice', password: PASSWORD, client_id: APP.id, client_secret: APP.secret }))
    const refresh = (token: string) => fresh(`${c.url}/token`, form({ grant_type: 'refresh_token', refresh_token: token, client_id: APP.id, client_secret: APP.secret }))
    const statuses: number[] = []
    const served: Answer[] = []
    await Promise.all(Array.from({ length: 200 }, async () => {
      const first = await login()
      statuses.push(first.status)
      let token = (JSON.parse(first.body) as { refresh_token: string }).refresh_token
      for (let step = 0; step < 3; step++) {
        const next = await refresh(token)
        statuses.push(next.status)
        served.push(next)
        token = (JSON.parse(next.body) as { refresh_token: string }).refresh_token
      }
    }))
    expect(statuses.filter((status) => status !== 200), served.find((answer) => answer.status !== 200)?.body).toEqual([])
    expect(statuses).toHaveLength(800)
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(served).toHaveLength(600)
    expect(c.servedBy('/token').size).toBe(2)
  }, 60_000)

  it('a reload (SIGHUP to the primary) reaches both workers', async () => {
    const token = await serviceToken(c, 'items:read')
    expect((await fresh(`${c.url}/api/items/4`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
    const next = structuredClone(c.config)
    next.routes = [{ id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['items:write'] } }]
    writeFileSync(c.file, stringify(next))
    c.process.child.kill('SIGHUP')
    // Each worker reloads on its own: until both answer, some requests still meet the old config.
    await waitFor('both workers to take the new scopes', async () => {
      const answers = await fromBoth(c, () => fresh(`${c.url}/api/items/4`, { headers: { authorization: `Bearer ${token}` } }))
      return answers.every((answer) => answer.status === 403)
    }, 10_000)
    const answers = await fromBoth(c, () => fresh(`${c.url}/api/items/4`, { headers: { authorization: `Bearer ${token}` } }))
    expect(answers.every((answer) => answer.status === 403)).toBe(true)
    writeFileSync(c.file, stringify(c.config))
    c.process.child.kill('SIGHUP')
    // Each worker reloads on its own (parsing on a thread of its own): back on both before the next test.
    await waitFor('the first config back on both workers', async () => {
      const back = await fromBoth(c, () => fresh(`${c.url}/api/items/4`, { headers: { authorization: `Bearer ${token}` } }))
      return back.every((answer) => answer.status === 200)
    }, 10_000)
  })

  it('a killed worker is replaced, and the other keeps serving meanwhile', async () => {
    const token = await serviceToken(c)
    const [first, second] = c.started()
    process.kill(first!, 'SIGKILL')
    const meanwhile = await Promise.all(Array.from({ length: 20 }, () => fresh(`${c.url}/api/items/5`, { headers: { authorization: `Bearer ${token}` } })))
    expect(meanwhile.every((answer) => answer.status === 200)).toBe(true)
    await waitFor('a third worker', async () => c.started().length === 3, 10_000)
    const replacement = c.started()[2]!
    const answers = await fromBoth(c, () => fresh(`${c.url}/api/items/5`, { headers: { authorization: `Bearer ${token}` } }))
    expect(pidsOf(c, answers)).toEqual(new Set([second, replacement]))
  })

  it('SIGTERM drains both workers: requests in flight complete, then the primary exits 0', async () => {
    const token = await serviceToken(c)
    // /slow… waits 600 ms at the upstream; both workers get some.
    const inFlight = Array.from({ length: 10 }, () => fresh(`${c.url}/slow/1`, { headers: { authorization: `Bearer ${token}` } }))
    await new Promise((resolve) => setTimeout(resolve, 200))
    c.process.child.kill('SIGTERM')
    const answers = await Promise.all(inFlight)
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(200))
    expect(await c.process.exited).toEqual({ code: 0, signal: null })
    await expect(fresh(`${c.url}/api/items/1`)).rejects.toThrow()
  })
})
