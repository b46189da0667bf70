/**
 * Rate limits at the gateway (`rate_limits`): per client, subject, claim, header or address; overrides per key
 * value; the IETF RateLimit-Policy / RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11); checked
 * after authentication, so a forged token spends nothing; all or nothing across a route's policies; in memory, and
 * shared by two gateways on Redis, with Redis down following the policy. Every 429 proves the upstream was not
 * reached. Several workers of one process: test/server/workers.test.ts.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { mkdtempSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { stringify } from 'yaml'
import { runPortcullis } from '../../src/server/run.js'
import { clusterLimiter } from '../../src/authserver/throttle.js'
import { ipcBroadcast, ipcFirstUse } from '../../src/server/cluster-messages.js'
import { ipcRates } from '../../src/server/cluster-rates.js'
import { labelValues, scrape, valueOf } from '../support/prometheus.js'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { testClock } from '../support/clock.js'
import { configProblems } from '../support/config-problems.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const REDIS_URL = process.env.REDIS_URL

const POLICIES = {
  'per-client': { limit: 3, window: '1s', key: 'client_id', overrides: { vip: { limit: 6 } } },
  'per-tenant': { limit: 2, window: '10s', key: 'claim:org.tenant', fallback: 'refuse' },
  'per-address': { limit: 2, window: '1s', key: 'address' },
  'per-key': { limit: 2, window: '1s', key: 'header:X-Api-Key' },
  'roomy': { limit: 100, window: '10s', key: 'client_id' },
  'tight': { limit: 2, window: '10s', key: 'client_id' },
  'one-a-10s': { limit: 1, window: '10s', key: 'client_id' },
  'one-a-minute': { limit: 1, window: '60s', key: 'client_id' },
}

const ROUTES = [
  { id: 'orders', path: '/orders/**', upstream: 'main', rate_limits: ['per-client'] },
  { id: 'quiet', path: '/quiet/**', upstream: 'main', rate_limits: ['per-client'], rate_limit_headers: false },
  { id: 'tenants', path: '/tenants/**', upstream: 'main', rate_limits: ['per-tenant'] },
  { id: 'open', path: '/open/**', upstream: 'main', auth: 'none' },
  { id: 'keys', path: '/keys/**', upstream: 'main', rate_limits: ['per-key'] },
  { id: 'unlimited', path: '/unlimited/**', upstream: 'main', rate_limits: [] },
  { id: 'both', path: '/both/**', upstream: 'main', rate_limits: ['roomy', 'tight'] },
  { id: 'waits', path: '/waits/**', upstream: 'main', rate_limits: ['one-a-10s', 'one-a-minute'] },
]

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway
const clock = testClock()

beforeAll(async () => {
  [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway({
    ...testConfig({ upstream, issuer, routes: ROUTES }),
    rate_limits: { policies: POLICIES, default: ['per-address'] },
  }, { now: clock.now })
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

beforeEach(() => {
  upstream.requests.length = 0
  // Every bucket full again (the longest window is 10 s, but for `one-a-minute`, which one test's client alone
  // uses); tokens live longer than the suite's advances.
  clock.advance(11_000)
})

const token = (clientId: string, claims: Record<string, unknown> = {}) => issuer.sign({ client_id: clientId, ...claims })

async function statuses(path: string, bearer: string | undefined, count: number, headers: Record<string, string> = {}): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${gateway.url}${path}`, { headers: { ...headers, ...(bearer !== undefined && { authorization: `Bearer ${bearer}` }) } })
    out.push(res.status)
  }
  return out
}

describe('a policy per client', () => {
  it('lets exactly N through, refuses N+1 with 429, Retry-After and the fields, and forwards none of the refused', async () => {
    const a = await token('client-a')
    const first = await fetch(`${gateway.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })
    expect(first.status).toBe(200)
    expect(first.headers.get('ratelimit-policy')).toBe('"per-client";q=3;w=1')
    expect(first.headers.get('ratelimit')).toBe('"per-client";r=2;t=1')
    expect(await statuses('/orders/1', a, 2)).toEqual([200, 200])
    const refused = await fetch(`${gateway.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBe('1')
    expect(refused.headers.get('ratelimit')).toBe('"per-client";r=0;t=1')
    expect(await refused.json()).toMatchObject({ error: 'rate_limited' })
    expect(upstream.requests).toHaveLength(3)
  })

  it('counts each client apart, and an override gives one client more', async () => {
    const [a, b, vip] = await Promise.all([token('client-a'), token('client-b'), token('vip')])
    expect(await statuses('/orders/1', a, 4)).toEqual([200, 200, 200, 429])
    expect(await statuses('/orders/1', b, 4)).toEqual([200, 200, 200, 429])
    const vipFirst = await fetch(`${gateway.url}/orders/1`, { headers: { authorization: `Bearer ${vip}` } })
    expect(vipFirst.headers.get('ratelimit-policy')).toBe('"per-client";q=6;w=1')
    expect(await statuses('/orders/1', vip, 6)).toEqual([200, 200, 200, 200, 200, 429])  // 6 with the first
  })

  it('refills: one request back per window/limit, all of them after the window', async () => {
    const a = await token('client-a')
    expect(await statuses('/orders/1', a, 4)).toEqual([200, 200, 200, 429])
    clock.advance(334)
    expect(await statuses('/orders/1', a, 2)).toEqual([200, 429])
    clock.advance(1000)
    expect(await statuses('/orders/1', a, 4)).toEqual([200, 200, 200, 429])
  })

  it('a forged or expired token spends nothing of the client\'s budget (checked after authentication)', async () => {
    const a = await token('client-a')
    const forged = `${a.slice(0, -4)}AAAA`
    expect(await statuses('/orders/1', forged, 5)).toEqual([401, 401, 401, 401, 401])
    expect(await statuses('/orders/1', await issuer.sign({ client_id: 'client-a', exp: Math.floor(Date.now() / 1000) - 600 }), 2)).toEqual([401, 401])
    expect(await statuses('/orders/1', a, 4)).toEqual([200, 200, 200, 429])
  })

  it('rate_limit_headers: false sends no fields, not even on the 429; the limit holds', async () => {
    const a = await token('client-q')
    const res = await fetch(`${gateway.url}/quiet/1`, { headers: { authorization: `Bearer ${a}` } })
    expect([res.status, res.headers.get('ratelimit'), res.headers.get('ratelimit-policy')]).toEqual([200, null, null])
    await statuses('/quiet/1', a, 2)
    const refused = await fetch(`${gateway.url}/quiet/1`, { headers: { authorization: `Bearer ${a}` } })
    expect([refused.status, refused.headers.get('ratelimit'), refused.headers.get('retry-after')]).toEqual([429, null, '1'])
  })
})

describe('a route with several policies: all or nothing', () => {
  it('a request refused by the tight policy spends nothing of the roomy one (10 requests, 2 admitted: roomy says 98 left, not 90)', async () => {
    const a = await token('client-both')
    const seen = await statuses('/both/1', a, 9)
    expect(seen).toEqual([200, 200, 429, 429, 429, 429, 429, 429, 429])
    const refused = await fetch(`${gateway.url}/both/1`, { headers: { authorization: `Bearer ${a}` } })
    expect(refused.status).toBe(429)
    expect(refused.headers.get('ratelimit')).toBe('"roomy";r=98;t=1, "tight";r=0;t=10')
    expect(upstream.requests).toHaveLength(2)
  })

  it('when several refuse, Retry-After is the longest wait, not the first policy\'s', async () => {
    const a = await token('client-waits')
    expect(await statuses('/waits/1', a, 1)).toEqual([200])
    const refused = await fetch(`${gateway.url}/waits/1`, { headers: { authorization: `Bearer ${a}` } })
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBe('60')
    expect(refused.headers.get('ratelimit')).toBe('"one-a-10s";r=0;t=10, "one-a-minute";r=0;t=60')
    expect(upstream.requests).toHaveLength(1)
  })
})

describe('under server.workers with the memory store (the primary counts)', () => {
  it('no primary to answer is a store failure: a closed policy answers 503 at once, an open one lets the request through', async () => {
    const config = (onFailure: string) => ({
      ...testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/orders/**', upstream: 'main', rate_limits: ['per-client'] }] }),
      rate_limits: { policies: { 'per-client': { limit: 4, window: '10s', key: 'client_id', on_store_failure: onFailure } } },
    })
    // A worker's real channels, in a process that is no cluster worker: the primary is not there.
    const workers = { broadcast: ipcBroadcast(), limiter: clusterLimiter, once: ipcFirstUse(), rates: ipcRates() }
    const [closed, open] = await Promise.all([startGateway(config('closed'), { workers }), startGateway(config('open'), { workers })])
    try {
      const a = await token('client-no-primary')
      const refused = await fetch(`${closed.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })
      expect(refused.status).toBe(503)
      expect(refused.headers.get('retry-after')).toBe('1')
      expect((await fetch(`${open.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })).status).toBe(200)
      expect(upstream.requests).toHaveLength(1)
      expect(await closed.app.metrics.registry.metrics()).toContain('portcullis_rate_limit_store_errors_total{policy="per-client",outcome="closed"} 1')
    } finally {
      await Promise.all([closed.close(), open.close()])
    }
  })
})

describe('other keys', () => {
  it('a claim: clients of one tenant share its budget; without the claim, fallback: refuse is 429 at once', async () => {
    const [x, y, other, none] = await Promise.all([
      token('x', { org: { tenant: 'acme' } }), token('y', { org: { tenant: 'acme' } }), token('z', { org: { tenant: 'globex' } }), token('n'),
    ])
    expect(await statuses('/tenants/1', x, 1)).toEqual([200])
    expect(await statuses('/tenants/1', y, 2)).toEqual([200, 429])
    expect(await statuses('/tenants/1', other, 1)).toEqual([200])
    // A claim that is an object or an array is no key either.
    expect(await statuses('/tenants/1', none, 1)).toEqual([429])
    expect(await statuses('/tenants/1', await token('o', { org: { tenant: { id: 'acme' } } }), 1)).toEqual([429])
    expect(upstream.requests).toHaveLength(3)
  })

  it('the address on an anonymous route (the default policy), whatever token or header a client sends', async () => {
    expect(await statuses('/open/1', undefined, 3)).toEqual([200, 200, 429])
    expect(await statuses('/open/1', await token('another'), 1, { 'x-forwarded-for': '203.0.113.9' })).toEqual([429])
  })

  it('a header where the config names one; its absence falls back to the address', async () => {
    const a = await token('client-a')
    expect(await statuses('/keys/1', a, 3, { 'x-api-key': 'k1' })).toEqual([200, 200, 429])
    expect(await statuses('/keys/1', a, 1, { 'x-api-key': 'k2' })).toEqual([200])
    expect(await statuses('/keys/1', a, 3)).toEqual([200, 200, 429])
  })

  it('rate_limits: [] opts a route out of the default policy', async () => {
    expect(await statuses('/unlimited/1', await token('client-a'), 6)).toEqual([200, 200, 200, 200, 200, 200])
  })
})

describe('reload and metrics (a real process: portcullis start)', () => {
  it('a reload that changes one policy keeps the other\'s buckets; 429s are counted by route and policy, never by key', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-limits-'))
    const file = path.join(dir, 'portcullis.yaml')
    const config = (limitA: number) => ({
      ...testConfig({ upstream, issuer, routes: [
        { id: 'a', path: '/a/**', upstream: 'main', rate_limits: ['policy-a'] },
        { id: 'b', path: '/b/**', upstream: 'main', rate_limits: ['policy-b'] },
      ] }),
      admin: { listen: '127.0.0.1:0' },
      rate_limits: { policies: { 'policy-a': { limit: limitA, window: '1m', key: 'client_id' }, 'policy-b': { limit: 3, window: '1m', key: 'client_id' } } },
    })
    writeFileSync(file, stringify(config(3)))
    const running = await runPortcullis(file, { port: 0, adminPort: 0, watch: false, logStream: new Writable({ write(_c, _e, callback) { callback() } }) })
    try {
      const url = `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`
      const a = await token('reloaded-client')
      const send = async (route: string, count: number) => {
        const out: number[] = []
        for (let i = 0; i < count; i++) out.push((await fetch(`${url}/${route}/1`, { headers: { authorization: `Bearer ${a}` } })).status)
        return out
      }
      expect(await send('a', 4)).toEqual([200, 200, 200, 429])
      expect(await send('b', 2)).toEqual([200, 200])
      writeFileSync(file, stringify(config(5)))
      expect(await running.reload('test')).toBe(true)
      expect(await send('b', 2)).toEqual([200, 429])
      expect(await send('a', 6)).toEqual([200, 200, 200, 200, 200, 429])
      const scraped = await scrape(`http://127.0.0.1:${(running.admin!.server.address() as AddressInfo).port}/metrics`)
      expect(valueOf(scraped, 'portcullis_rate_limited_total', { route: 'a', policy: 'policy-a' })).toBe(2)
      expect(valueOf(scraped, 'portcullis_rate_limited_total', { route: 'b', policy: 'policy-b' })).toBe(1)
      expect(labelValues(scraped).some(({ value }) => value.includes('reloaded-client'))).toBe(false)
    } finally {
      await running.shutdown()
    }
  })
})

describe('rate_limits at load', () => {
  const base = 'upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: r\n    path: "/r"\n    upstream: main\n'
  const problems = (text: string) => configProblems(base + text)

  it('refuses an unknown policy, a window under 1s, a bad key, Redis with nothing to connect to', () => {
    expect(problems('    rate_limits: [nope]\nrate_limits:\n  policies:\n    a: { limit: 1, window: 1s, key: sub }\n'))
      .toEqual(['routes[0].rate_limits[0]: unknown rate limit policy "nope"'])
    expect(problems('    rate_limits: [per-clent]\nrate_limits:\n  policies:\n    per-client: { limit: 1, window: 1s, key: client_id }\n'))
      .toEqual(['routes[0].rate_limits[0]: unknown rate limit policy "per-clent" (did you mean "per-client"?)'])
    expect(problems('rate_limits:\n  policies:\n    a: { limit: 1, window: 500ms, key: sub }\n')).toEqual(['rate_limits.policies.a.window: must be at least 1s'])
    expect(problems('rate_limits:\n  policies:\n    a: { limit: 1, window: 1s, key: "claim:" }\n')).toHaveLength(1)
    expect(problems('rate_limits:\n  policies:\n    a: { limit: 1, window: 1s, key: cookie }\n')).toHaveLength(1)
    expect(problems('rate_limits:\n  store: { type: redis }\n  policies:\n    a: { limit: 1, window: 1s, key: sub }\n'))
      .toEqual(['rate_limits.store.url: is required: the authorization server has no Redis store to share'])
  })
})

describe.skipIf(REDIS_URL === undefined)(`on Redis${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  const shared = (prefix: string, extra: Record<string, unknown> = {}) => ({
    ...testConfig({ upstream, issuer, routes: [{ id: 'orders', path: '/orders/**', upstream: 'main', rate_limits: ['per-client'] }] }),
    rate_limits: { store: { type: 'redis', url: REDIS_URL, prefix, timeout: '200ms' }, policies: { 'per-client': { limit: 4, window: '10s', key: 'client_id' } } },
    ...extra,
  })

  it('two gateways share one budget: N allowed across both, N+1 refused on either', async () => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const [one, two] = await Promise.all([startGateway(shared(prefix)), startGateway(shared(prefix))])
    try {
      const a = await token('client-r')
      const call = (target: RunningGateway) => fetch(`${target.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } }).then((res) => res.status)
      const seen = [await call(one), await call(two), await call(one), await call(two), await call(one), await call(two)]
      expect(seen).toEqual([200, 200, 200, 200, 429, 429])
      expect(upstream.requests).toHaveLength(4)
    } finally {
      await Promise.all([one.close(), two.close()])
    }
  })

  it('all or nothing in one script: refused by the tight policy, the roomy one spends nothing (its key keeps the 2 admitted)', async () => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const one = await startGateway({
      ...testConfig({ upstream, issuer, routes: [{ id: 'both', path: '/both/**', upstream: 'main', rate_limits: ['roomy', 'tight'] }] }),
      rate_limits: { store: { type: 'redis', url: REDIS_URL, prefix }, policies: { roomy: POLICIES.roomy, tight: POLICIES.tight } },
    })
    const redis = new Redis(REDIS_URL!)
    try {
      const a = await token('client-both-redis')
      const call = () => fetch(`${one.url}/both/1`, { headers: { authorization: `Bearer ${a}` } })
      const seen: number[] = []
      for (let i = 0; i < 9; i++) seen.push((await call()).status)
      expect(seen).toEqual([200, 200, 429, 429, 429, 429, 429, 429, 429])
      const refused = await call()
      expect(refused.status).toBe(429)
      expect(refused.headers.get('ratelimit')).toMatch(/^"roomy";r=98;t=\d+, "tight";r=0;t=\d+$/)
      // The roomy key's TAT is two emission intervals (2 × 100 ms) ahead, as after 2 requests, not 10.
      const roomyKey = (await redis.keys(`${prefix}rl:roomy:*`))[0]!
      expect(await redis.pttl(roomyKey)).toBeLessThanOrEqual(200)
      expect(upstream.requests).toHaveLength(2)
    } finally {
      await one.close()
      await redis.del(...await redis.keys(`${prefix}*`), 'nothing')
      redis.disconnect()
    }
  })

  it('keeps one key per client under the prefix (its hash tag), named by a hash of the key value, expiring when the bucket is full', async () => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const one = await startGateway(shared(prefix))
    const redis = new Redis(REDIS_URL!)
    try {
      await fetch(`${one.url}/orders/1`, { headers: { authorization: `Bearer ${await token('client-secret-name')}` } })
      const keys = await redis.keys(`${prefix}*`)
      expect(keys).toHaveLength(1)
      expect(keys[0]).toMatch(new RegExp(`^${prefix.replace(/[{}]/g, '\\$&')}rl:per-client:[A-Za-z0-9_-]{43}$`))
      expect(keys[0]).not.toContain('client-secret-name')
      const ttl = await redis.pttl(keys[0]!)
      expect(ttl).toBeGreaterThan(0)
      expect(ttl).toBeLessThanOrEqual(2500)  // one request's share of a 10 s window for 4: 2.5 s
    } finally {
      await one.close()
      await redis.del(...await redis.keys(`${prefix}*`), 'nothing')
      redis.disconnect()
    }
  })

  it('Redis down: a closed policy answers 503 at once, an open one lets the request through; never a hang', async () => {
    const down = `redis://127.0.0.1:${await closedPort()}`
    const config = (onFailure: string) => ({
      ...shared('{x}:'),
      rate_limits: { store: { type: 'redis', url: down, timeout: '200ms' }, policies: { 'per-client': { limit: 4, window: '10s', key: 'client_id', on_store_failure: onFailure } } },
    })
    const [closed, open] = await Promise.all([startGateway(config('closed')), startGateway(config('open'))])
    try {
      const a = await token('client-d')
      const started = performance.now()
      const refused = await fetch(`${closed.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })
      expect(refused.status).toBe(503)
      expect(refused.headers.get('retry-after')).toBe('1')
      expect((await fetch(`${open.url}/orders/1`, { headers: { authorization: `Bearer ${a}` } })).status).toBe(200)
      expect(performance.now() - started).toBeLessThan(5000)
      expect(upstream.requests).toHaveLength(1)
    } finally {
      await Promise.all([closed.close(), open.close()])
    }
  })
})
