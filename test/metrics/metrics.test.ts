/**
 * Prometheus metrics (issue 6 item 2) scraped over HTTP from the admin listener of the real process
 * (runPortcullis on loopback): counters move by exactly what a known sequence of requests should move
 * them, label values stay bounded (no path, token or subject ever becomes one), /metrics is absent from
 * the public listener, and docs/metrics.md and docs/grafana-dashboard.json name only what is exposed.
 */
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { runPortcullis, type RunningPortcullis } from '../../src/server/run.js'
import { basic } from '../support/authserver.js'
import { startIntrospectionServer, type TestIntrospectionServer } from '../support/introspection.js'
import { createSigningKey, startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { exposedNames, labelValues, scrape, valueOf, type Scrape } from '../support/prometheus.js'
import { PROMTOOL, PROMTOOL_SKIPPED, promtoolCheck } from '../support/promtool.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const SUBJECT = 'subject-jwt-4d1f9c'
const OPAQUE_SUBJECT = 'subject-introspected-93ab7e'
const OPAQUE_ISSUER = 'https://opaque.example'
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
const MADE_UP_ISSUER = 'https://made-up.example/label-injection'

interface Env {
  running: RunningPortcullis
  url: string
  metricsUrl: string
  upstream: RecordingUpstream
  issuer: TestIssuer
  idp: TestIntrospectionServer
  embeddedIssuer: string
}

let env: Env
/** What must never be a label value: every path requested, token sent or issued, and subject. */
const secrets = { paths: new Set<string>(), tokens: new Set<string>(), other: new Set([SUBJECT, OPAQUE_SUBJECT, MADE_UP_ISSUER]) }

beforeAll(async () => {
  const [upstream, issuer, idp, port] = await Promise.all([startRecordingUpstream(), startTestIssuer(), startIntrospectionServer(), closedPort()])
  const embeddedIssuer = `http://127.0.0.1:${port}`
  const config = {
    server: { listen: '127.0.0.1:0', realm: 'test' },
    admin: { listen: '127.0.0.1:0' },
    upstreams: { main: { url: upstream.url, timeout: '2s' } },
    issuers: [
      { issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256', 'RS256'], require_typ: 'at+jwt' },
      {
        issuer: OPAQUE_ISSUER, audience: ['orders-api'],
        introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, token_prefix: 'op_', timeout: '300ms' },
      },
    ],
    routes: [
      { id: 'orders', path: '/orders/**', upstream: 'main', scopes: { all: ['orders:read'] } },
      { id: 'admin', path: '/admin/**', upstream: 'main', scopes: { all: ['orders:admin'] } },
    ],
    authorization_server: {
      enabled: true, issuer: embeddedIssuer, store: { type: 'memory' }, access_token: { audience: ['orders-api'] },
      clients: [{ ...SVC, grant_types: ['client_credentials'], scopes: ['orders:read'] }],
    },
    log: { level: 'warn' },
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-metrics-'))
  const file = path.join(dir, 'portcullis.yaml')
  writeFileSync(file, stringify(config))
  const logStream = new Writable({ write(_chunk, _encoding, callback) { callback() } })
  const running = await runPortcullis(file, { port, adminPort: 0, watch: false, logStream })
  const adminPort = (running.admin!.server.address() as AddressInfo).port
  env = {
    running, upstream, issuer, idp, embeddedIssuer,
    url: `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`,
    metricsUrl: `http://127.0.0.1:${adminPort}/metrics`,
  }
  // The key set is prefetched in the background: wait for it, so no test races the first fetch.
  await until(async () => valueOf(await scrape(env.metricsUrl), 'portcullis_jwks_keys', { issuer: issuer.issuer }) === 2)
})

afterAll(async () => {
  await env?.running.shutdown('test')
  await Promise.all([env?.upstream.close(), env?.issuer.close(), env?.idp.close()])
})

async function until(check: () => Promise<boolean>, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** A proxied GET; the path and token are remembered as values no label may carry. */
async function get(pathname: string, token?: string): Promise<number> {
  secrets.paths.add(pathname)
  if (token !== undefined) secrets.tokens.add(token)
  const res = await fetch(`${env.url}${pathname}`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } })
  await res.arrayBuffer()
  return res.status
}

async function sign(claims: Record<string, unknown> = {}, options: Parameters<TestIssuer['sign']>[1] = {}): Promise<string> {
  return env.issuer.sign({ sub: SUBJECT, scope: 'orders:read', ...claims }, options)
}

function opaqueToken(prefix = 'op_'): string {
  return prefix + randomBytes(24).toString('base64url')
}

function total(scraped: Scrape, name: string): number {
  return scraped.samples.filter((sample) => sample.name === name).reduce((sum, sample) => sum + sample.value, 0)
}

/**
 * A scrape once the `sent` proxied requests since `before` are all recorded (a request is counted when
 * its response closes, which may be a moment after the client has read it).
 */
async function settled(before: Scrape, sent: number): Promise<{ after: Scrape; delta: (name: string, labels?: Record<string, string>) => number }> {
  let after = before
  await until(async () => {
    after = await scrape(env.metricsUrl)
    return total(after, 'portcullis_requests_total') - total(before, 'portcullis_requests_total') >= sent
  })
  return { after, delta: (name, labels = {}) => valueOf(after, name, labels) - valueOf(before, name, labels) }
}

const REQUESTS = 'portcullis_requests_total'
const VALIDATIONS = 'portcullis_token_validations_total'
const CACHE = 'portcullis_cache_lookups_total'
/** A whole metric name (not a prefix such as `portcullis_process_*`). */
const METRIC_NAME = /\bportcullis_[a-z0-9_]*[a-z0-9](?![a-z0-9_*])/g

describe('metrics on the admin listener', () => {
  it('counts proxied requests by route, method, status, decision, reason and protocol, and times them', async () => {
    const before = await scrape(env.metricsUrl)
    const token = await sign()
    const expired = await sign({}, { expiresIn: -3600 })
    expect(await get('/orders/1', token)).toBe(200)
    expect(await get('/orders/2', token)).toBe(200)
    expect(await get('/orders/3')).toBe(401)
    expect(await get('/orders/4', expired)).toBe(401)
    expect(await get('/admin/users', token)).toBe(403)
    expect(await get('/nowhere/secret-path')).toBe(404)
    const { delta, after } = await settled(before, 6)
    const request = (route: string, status: string, decision: string, reason: string) =>
      delta(REQUESTS, { route, method: 'GET', status, decision, reason, protocol: 'http1' })
    expect(request('orders', '200', 'forwarded', '')).toBe(2)
    expect(request('orders', '401', 'denied', 'unauthorized')).toBe(1)
    expect(request('orders', '401', 'denied', 'invalid_token')).toBe(1)
    expect(request('admin', '403', 'denied', 'insufficient_scope')).toBe(1)
    expect(request('(none)', '404', 'rejected', 'not_found')).toBe(1)
    expect(total(after, REQUESTS) - total(before, REQUESTS)).toBe(6)
    expect(delta('portcullis_request_duration_seconds_count', { route: 'orders' })).toBe(4)
    expect(delta('portcullis_request_duration_seconds_count', { route: 'admin' })).toBe(1)
    expect(delta('portcullis_request_duration_seconds_count', { route: '(none)' })).toBe(1)
    expect(delta('portcullis_upstream_duration_seconds_count', { upstream: 'main', outcome: 'response' })).toBe(2)
    // insufficient_scope is decided after validation: the token was valid (and a cache hit).
    expect(delta(VALIDATIONS, { issuer: env.issuer.issuer, method: 'jwt', result: 'valid', reason: 'ok' })).toBe(3)
    expect(delta(VALIDATIONS, { issuer: env.issuer.issuer, method: 'jwt', result: 'invalid', reason: 'expired' })).toBe(1)
    expect(delta(CACHE, { cache: 'jwt', result: 'hit' })).toBe(2)
    expect(delta(CACHE, { cache: 'jwt', result: 'miss' })).toBe(2)
    expect(env.upstream.requests.map((request) => request.url)).toEqual(['/orders/1', '/orders/2'])
  })

  it('counts JWT validations by configured issuer, result and bounded reason, cache hits included', async () => {
    const before = await scrape(env.metricsUrl)
    const token = await sign()
    const rogue = await createSigningKey('ES256')
    const tokens = {
      expired: await sign({}, { expiresIn: -3600 }),
      badSignature: await sign({}, { key: rogue, kid: env.issuer.keys.find((key) => key.alg === 'ES256')!.kid }),
      wrongAudience: await sign({ aud: 'another-api' }),
      notYetValid: await sign({ nbf: Math.floor(Date.now() / 1000) + 3600 }),
      wrongType: await sign({}, { typ: 'JWT' }),
      madeUpIssuer: await sign({ iss: MADE_UP_ISSUER }),
      malformed: 'eyJub3QiOiJqc29u.bm90LWpzb24.c2ln',
    }
    expect(await get('/orders/a', token)).toBe(200)
    expect(await get('/orders/b', token)).toBe(200)
    for (const [name, bad] of Object.entries(tokens)) expect(await get(`/orders/${name}`, bad), name).toBe(401)
    const { delta } = await settled(before, 2 + Object.keys(tokens).length)
    const jwt = (result: string, reason: string) => delta(VALIDATIONS, { issuer: env.issuer.issuer, method: 'jwt', result, reason })
    expect(jwt('valid', 'ok')).toBe(2)
    expect(jwt('invalid', 'expired')).toBe(1)
    expect(jwt('invalid', 'bad_signature')).toBe(1)
    expect(jwt('invalid', 'wrong_audience')).toBe(1)
    expect(jwt('invalid', 'not_yet_valid')).toBe(1)
    expect(jwt('invalid', 'wrong_type')).toBe(1)
    // A token naming an issuer that is not configured is counted under `unknown`, never under its own iss.
    expect(delta(VALIDATIONS, { issuer: 'unknown', method: 'jwt', result: 'invalid', reason: 'unknown_issuer' })).toBe(1)
    expect(delta(VALIDATIONS, { issuer: 'unknown', method: 'jwt', result: 'invalid', reason: 'malformed' })).toBe(1)
    expect(delta(CACHE, { cache: 'jwt', result: 'hit' })).toBe(1)
    expect(delta(CACHE, { cache: 'jwt', result: 'miss' })).toBe(1 + Object.keys(tokens).length)
  })

  it('counts introspection calls by outcome with their latency, and introspected tokens by result', async () => {
    const before = await scrape(env.metricsUrl)
    const calls = env.idp.callCount
    const exp = Math.floor(Date.now() / 1000) + 3600
    const [active, inactive, slow, broken, unclaimed] = [opaqueToken(), opaqueToken(), opaqueToken(), opaqueToken(), opaqueToken('zz_')]
    env.idp.answerJson(active, { active: true, sub: OPAQUE_SUBJECT, client_id: 'client-1', scope: 'orders:read', exp })
    env.idp.answerJson(inactive, { active: false })
    env.idp.answer(slow, { json: { active: true, scope: 'orders:read', exp }, delayMs: 1500 })
    env.idp.answer(broken, { status: 500, text: 'oops' })
    expect(await get('/orders/i1', active)).toBe(200)
    expect(await get('/orders/i2', active)).toBe(200)
    expect(await get('/orders/i3', inactive)).toBe(401)
    expect(await get('/orders/i4', slow)).toBe(503)
    expect(await get('/orders/i5', broken)).toBe(401)
    expect(await get('/orders/i6', unclaimed)).toBe(401)
    const { delta } = await settled(before, 6)
    const call = (outcome: string) => delta('portcullis_introspection_requests_total', { issuer: OPAQUE_ISSUER, outcome })
    expect([call('active'), call('inactive'), call('timeout'), call('error')]).toEqual([1, 1, 1, 1])
    expect(delta('portcullis_introspection_duration_seconds_count', { issuer: OPAQUE_ISSUER })).toBe(4)
    expect(env.idp.callCount - calls).toBe(4)
    const introspected = (result: string, reason: string) =>
      delta(VALIDATIONS, { issuer: OPAQUE_ISSUER, method: 'introspection', result, reason })
    expect(introspected('valid', 'ok')).toBe(2)
    expect(introspected('invalid', 'inactive')).toBe(1)
    expect(introspected('unavailable', 'introspection_unavailable')).toBe(1)
    expect(introspected('invalid', 'bad_introspection_response')).toBe(1)
    expect(delta(VALIDATIONS, { issuer: 'unknown', method: 'introspection', result: 'invalid', reason: 'unknown_issuer' })).toBe(1)
    expect(delta(REQUESTS, { route: 'orders', method: 'GET', status: '503', decision: 'unavailable', reason: 'temporarily_unavailable', protocol: 'http1' })).toBe(1)
    // The second use of the active token, and nothing else, was answered from the cache.
    expect(delta(CACHE, { cache: 'introspection', result: 'hit' })).toBe(1)
    expect(delta(CACHE, { cache: 'introspection', result: 'miss' })).toBe(4)
  })

  it('counts tokens issued by grant type and client, token endpoint errors by code, and embedded validations', async () => {
    const before = await scrape(env.metricsUrl)
    const token = async (authorization: string) => {
      const res = await fetch(`${env.url}/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization },
        body: 'grant_type=client_credentials&scope=orders%3Aread',
      })
      return { status: res.status, body: await res.json() as { access_token?: string; error?: string } }
    }
    const issued = await token(basic(SVC.client_id, SVC.client_secret))
    expect(issued.status).toBe(200)
    const accessToken = issued.body.access_token!
    secrets.tokens.add(accessToken)
    expect(await token(basic(SVC.client_id, 'not-the-secret-at-all'))).toMatchObject({ status: 401, body: { error: 'invalid_client' } })
    expect(await token(basic('made-up-client', 'whatever-secret-123'))).toMatchObject({ status: 401, body: { error: 'invalid_client' } })
    secrets.other.add('made-up-client')
    expect(await get('/orders/e1', accessToken)).toBe(200)
    expect(await get('/orders/e2', accessToken)).toBe(200)
    const { delta } = await settled(before, 2)
    expect(delta('portcullis_tokens_issued_total', { grant_type: 'client_credentials', client_id: 'svc' })).toBe(1)
    expect(delta('portcullis_token_endpoint_errors_total', { error: 'invalid_client' })).toBe(2)
    expect(delta(VALIDATIONS, { issuer: env.embeddedIssuer, method: 'embedded', result: 'valid', reason: 'ok' })).toBe(2)
  })

  it('exports key-set fetches, age and size, and the token caches, read from the live gateway', async () => {
    const scraped = await scrape(env.metricsUrl)
    const issuer = env.issuer.issuer
    expect(valueOf(scraped, 'portcullis_jwks_fetches_total', { issuer, result: 'success' })).toBe(env.issuer.jwksFetches)
    expect(valueOf(scraped, 'portcullis_jwks_fetches_total', { issuer, result: 'failure' })).toBe(0)
    expect(valueOf(scraped, 'portcullis_jwks_keys', { issuer })).toBe(2)
    const age = valueOf(scraped, 'portcullis_jwks_age_seconds', { issuer })
    expect(age).toBeGreaterThanOrEqual(0)
    expect(age).toBeLessThan(60)
    // Only issuers with a remote key set have one: not the embedded server, not the introspecting issuer.
    expect(new Set(scraped.samples.filter((sample) => sample.name.startsWith('portcullis_jwks_')).map((sample) => sample.labels.issuer)))
      .toEqual(new Set([issuer]))
    for (const cache of ['jwt', 'introspection']) {
      expect(valueOf(scraped, 'portcullis_cache_capacity_entries', { cache })).toBe(100_000)
      expect(valueOf(scraped, 'portcullis_cache_evictions_total', { cache })).toBe(0)
    }
    const live = new Map(env.running.gateway.gateway.cacheStats().map((stats) => [stats.name, stats]))
    // The valid JWTs of the tests so far; the active opaque token and the inactive answer.
    expect(valueOf(scraped, 'portcullis_cache_entries', { cache: 'jwt' })).toBe(live.get('jwt')!.size)
    expect(live.get('jwt')!.size).toBeGreaterThanOrEqual(3)
    expect(valueOf(scraped, 'portcullis_cache_entries', { cache: 'introspection' })).toBe(live.get('introspection')!.size)
    expect(live.get('introspection')!.size).toBe(2)
  })

  it('does not serve /metrics on the public listener', async () => {
    const res = await fetch(`${env.url}/metrics`)
    expect(res.status).toBe(404)
    const text = await res.text()
    expect(text).not.toContain('portcullis_')
    expect(text).not.toContain('# TYPE')
  })

  it('exports the process metrics, prefixed portcullis_', async () => {
    const { types } = await scrape(env.metricsUrl)
    expect(types.get('portcullis_process_cpu_seconds_total')).toBe('counter')
    expect(types.get('portcullis_process_resident_memory_bytes')).toBe('gauge')
    expect(types.get('portcullis_nodejs_eventloop_lag_seconds')).toBe('gauge')
    expect(types.get('portcullis_nodejs_heap_size_used_bytes')).toBe('gauge')
    expect([...types.keys()].every((name) => name.startsWith('portcullis_'))).toBe(true)
  })

  it('renames prom-client\'s three gauges named …_total (a suffix Prometheus keeps for counters)', async () => {
    const { types } = await scrape(env.metricsUrl)
    for (const kind of ['handles', 'requests', 'resources']) {
      expect(types.has(`portcullis_nodejs_active_${kind}_total`), kind).toBe(false)
      expect(types.get(`portcullis_nodejs_active_${kind}_all`), kind).toBe('gauge')
    }
    expect(valueOf(await scrape(env.metricsUrl), 'portcullis_nodejs_active_handles_all')).toBeGreaterThan(0)
  })

  it.skipIf(PROMTOOL === undefined)(`passes promtool check metrics on a live scrape${PROMTOOL === undefined ? ` (${PROMTOOL_SKIPPED})` : ''}`, async () => {
    const { status, output } = promtoolCheck(await (await fetch(env.metricsUrl)).text())
    expect(output).toBe('')
    expect(status).toBe(0)
  })

  it('never makes a request path, a token or a subject a label value: every value is from the config or a fixed vocabulary', async () => {
    const scraped = await scrape(env.metricsUrl)
    const forbidden = [...secrets.paths, ...secrets.tokens, ...secrets.other]
    expect(secrets.tokens.size).toBeGreaterThan(10)
    for (const { name, label, value } of labelValues(scraped)) {
      for (const secret of forbidden) expect(value.includes(secret), `${name}{${label}="${value}"} contains ${secret}`).toBe(false)
    }
    const issuers = new Set([env.issuer.issuer, OPAQUE_ISSUER, env.embeddedIssuer, 'unknown'])
    const allowed: Record<string, (value: string) => boolean> = {
      route: (value) => ['orders', 'admin', '(none)'].includes(value),
      upstream: (value) => value === 'main',
      issuer: (value) => issuers.has(value),
      client_id: (value) => value === 'svc',
      status: (value) => /^\d{3}$/.test(value),
      sha256: (value) => /^[0-9a-f]{64}$/.test(value),
      le: (value) => value === '+Inf' || Number.isFinite(Number(value)),
      protocol: (value) => value === 'http1' || value === 'h2',
      grpc_status: (value) => value === 'unknown' || (/^\d{1,2}$/.test(value) && Number(value) <= 16),
      // portcullis_authorization_denials_total: the rule that failed, named by its place in the config.
      condition: (value) => /^(mcp\.(tools|prompts|methods)\.[^\s"]+\.)?(scopes\.(all|any)|claims\.any|claims\.all\[\d+\])$/.test(value),
    }
    const code = (value: string) => /^[A-Za-z_]{0,40}$/.test(value)
    for (const { name, label, value } of labelValues(scraped)) {
      if (/^portcullis_(process|nodejs)_/.test(name)) continue
      expect((allowed[label] ?? code)(value), `${name}{${label}="${value}"}`).toBe(true)
    }
  })

  it('documents every metric in docs/metrics.md, and the Grafana dashboard queries only metrics that are exposed', async () => {
    const scraped = await scrape(env.metricsUrl)
    const exposed = exposedNames(scraped)
    const ours = [...scraped.types.keys()].filter((name) => !/^portcullis_(process|nodejs)_/.test(name))
    const docs = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8')
    for (const name of ours) expect(docs, name).toContain(`\`${name}\``)
    // The renamed table's old names (`| old | new |` rows): gone, and documented as such.
    const gone = new Set([...docs.matchAll(/^\| `(portcullis_[a-z_]+)` \| `portcullis_[a-z_]+` \|$/gm)].map((match) => match[1]!))
    expect(gone.size).toBeGreaterThan(0)
    for (const name of gone) expect(exposed.has(name), `renamed ${name} still exposed`).toBe(false)
    for (const named of docs.match(METRIC_NAME) ?? []) if (!gone.has(named)) expect(exposed.has(named), `docs name ${named}`).toBe(true)

    const dashboard = JSON.parse(readFileSync(new URL('../../docs/grafana-dashboard.json', import.meta.url), 'utf8')) as {
      schemaVersion: number
      __inputs: Array<{ name: string; type: string; pluginId: string }>
      panels: Array<{ title: string; targets?: Array<{ expr: string }>; panels?: unknown[] }>
    }
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36)
    expect(dashboard.__inputs).toContainEqual(expect.objectContaining({ name: 'DS_PROMETHEUS', type: 'datasource', pluginId: 'prometheus' }))
    const exprs = dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ title: panel.title, expr: target.expr })))
    expect(exprs.length).toBeGreaterThanOrEqual(6)
    for (const { title, expr } of exprs) {
      const names = expr.match(METRIC_NAME) ?? []
      expect(names.length, title).toBeGreaterThan(0)
      for (const name of names) expect(exposed.has(name), `${title}: ${name}`).toBe(true)
    }
  })
})
