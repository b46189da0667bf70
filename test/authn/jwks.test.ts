/**
 * The per-issuer JWKS cache end to end: rotation, an unreachable JWKS endpoint, floods of unknown kids,
 * discovery (RFC 8414) and static file:// key sets, and (issue 3, point 5) background refresh, stale keys,
 * the key-set-changed log line and key-set statistics. Time is the gateway's injected clock, except for
 * the background refresh timer, which runs on real time; the issuer counts how often its /jwks was fetched.
 */
import { randomBytes } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { networkInterfaces, tmpdir } from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it, type TestContext } from 'vitest'
import { exportJWK, SignJWT, type JWTPayload } from 'jose'
import { Agent, request } from 'undici'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { createSigningKey, signWith, startTestIssuer, type SigningKey, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway, type StartOptions } from '../support/gateway.js'
import { testClock, type Clock } from '../support/clock.js'
import { INVALID_TOKEN_CHALLENGE, callOrders, deniedReasons, expectAccepted, expectInvalidToken } from '../support/harness.js'



interface Harness {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  clock: Clock
}

async function start(context: TestContext, options: {
  issuerExtra?: Record<string, unknown>
  /** Called with the issuer before the gateway boots (to take it down, rotate, …). */
  before?: (issuer: TestIssuer) => void | Promise<void>
  /** Rewrites the config's issuer entry (discovery, file://, …). */
  issuerConfig?: (issuer: TestIssuer) => Record<string, unknown>
  issuerOptions?: { path?: string }
  gatewayOptions?: StartOptions
  /** Top-level keys merged into the config (a `server` is merged into the test config's). */
  configExtra?: Record<string, unknown>
} = {}): Promise<Harness> {
  const clock = testClock()
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer(options.issuerOptions)])
  context.onTestFinished(() => Promise.all([upstream.close(), issuer.close()]).then(() => undefined))
  await options.before?.(issuer)
  const config = testConfig({ upstream, issuer, ...(options.issuerExtra && { issuerExtra: options.issuerExtra }) })
  if (options.issuerConfig) config.issuers = [options.issuerConfig(issuer)]
  for (const [key, value] of Object.entries(options.configExtra ?? {})) {
    config[key] = key === 'server' ? { ...config.server as object, ...value as object } : value
  }
  const gateway = await startGateway(config, { now: clock.now, ...options.gatewayOptions })
  context.onTestFinished(() => gateway.close())
  return { upstream, issuer, gateway, clock }
}

function claimsAt(clock: Clock, issuer: { issuer: string; audience: string }, extra: JWTPayload = {}): JWTPayload {
  return { iss: issuer.issuer, aud: issuer.audience, sub: 'user-1', iat: clock.seconds(), exp: clock.seconds() + 300, ...extra }
}

/** A token from the issuer's current ES256 key (or `key`), valid at the gateway's clock. */
function tokenAt(harness: Harness, options: { key?: SigningKey; kid?: string } = {}): Promise<string> {
  const key = options.key ?? harness.issuer.keys.find((k) => k.alg === 'ES256')!
  return signWith(key, claimsAt(harness.clock, harness.issuer), options.kid ? { kid: options.kid } : {})
}

async function expectUnavailable(harness: Harness, token: string, retryAfter: string): Promise<void> {
  const res = await callOrders(harness, token)
  expect(res.status).toBe(503)
  expect(res.headers.get('retry-after')).toBe(retryAfter)
  expect(res.headers.get('www-authenticate')).toBeNull()
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  expect(await res.json()).toEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' })
  expect(harness.upstream.requests).toHaveLength(0)
}

/** Lets a background refresh (stale-while-revalidate) finish before counting fetches. */
async function settle(issuer: TestIssuer, fetches: number): Promise<void> {
  for (let i = 0; i < 100 && issuer.jwksFetches < fetches; i++) await new Promise((resolve) => setTimeout(resolve, 10))
  await new Promise((resolve) => setTimeout(resolve, 20))
}

const COOLDOWN_MS = 30_000

describe('key rotation at the issuer', () => {
  it('accepts a new kid after a refetch, which the cooldown allows once per 30s', async (context) => {
    const harness = await start(context)
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(1)
    const fresh = await harness.issuer.rotate('ES256')
    // Within the cooldown of the boot-time fetch: the unknown kid does not trigger a fetch.
    await expectInvalidToken(harness, await tokenAt(harness, { key: fresh }))
    expect(harness.issuer.jwksFetches).toBe(1)
    expect(deniedReasons(harness.gateway)).toEqual(['unknown_kid'])
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    expect(harness.issuer.jwksFetches).toBe(2)
    // The old key is still published and still works, without another fetch.
    await expectAccepted(harness, await tokenAt(harness, { key: harness.issuer.keys[1]! }))
    expect(harness.issuer.jwksFetches).toBe(2)
    expect(harness.gateway.logs.some((line) => line.includes('issuer key set changed') && line.includes(fresh.kid))).toBe(true)
  })

  it('refuses tokens of a key the issuer withdrew once the new set is fetched', async (context) => {
    const harness = await start(context)
    const old = harness.issuer.keys.find((key) => key.alg === 'ES256')!
    await expectAccepted(harness, await tokenAt(harness, { key: old }))
    const fresh = await harness.issuer.rotate('ES256', true)
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    await expectInvalidToken(harness, await tokenAt(harness, { key: old }))
    expect(harness.issuer.jwksFetches).toBe(2)
  })

  it('picks up a rotation in the background once the key set is older than jwks_max_age', async (context) => {
    const harness = await start(context, { issuerExtra: { jwks_max_age: '5m' } })
    await expectAccepted(harness, await tokenAt(harness))
    const fresh = await harness.issuer.rotate('ES256', true)
    harness.clock.advance(5 * 60_000 + 1)
    // Served from the cached set while the refresh runs.
    await expectAccepted(harness, await tokenAt(harness, { key: harness.issuer.keys.find((k) => k.alg === 'RS256')! }))
    await settle(harness.issuer, 2)
    expect(harness.issuer.jwksFetches).toBe(2)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    expect(harness.issuer.jwksFetches).toBe(2)
  })

  it('honours a shorter jwks_cooldown', async (context) => {
    const harness = await start(context, { issuerExtra: { jwks_cooldown: '2s' } })
    await expectAccepted(harness, await tokenAt(harness))
    const fresh = await harness.issuer.rotate('ES256')
    harness.clock.advance(2001)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    expect(harness.issuer.jwksFetches).toBe(2)
  })
})

describe('JWKS endpoint down', () => {
  it('keeps using the cached keys when the JWKS endpoint fails', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness)
    await expectAccepted(harness, token)
    harness.issuer.setDown(true)
    // Past max age (10m by default): a background refresh fails, the cached keys keep working.
    harness.clock.advance(11 * 60_000)
    await expectAccepted(harness, await tokenAt(harness))
    await settle(harness.issuer, 2)
    expect(harness.issuer.jwksFetches).toBe(2)
    await expectAccepted(harness, await tokenAt(harness, { key: harness.issuer.keys.find((k) => k.alg === 'RS256')! }))
    // An unknown kid past the cooldown tries once more, fails, and is an invalid token — not a 503.
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectInvalidToken(harness, await tokenAt(harness, { kid: 'not-published' }))
    expect(harness.issuer.jwksFetches).toBe(3)
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.gateway.logs.some((line) => line.includes('key set refresh failed; keeping the keys already fetched'))).toBe(true)
  })

  it('answers 503 temporarily_unavailable with Retry-After when no key set could ever be fetched', async (context) => {
    const harness = await start(context, { before: (issuer) => issuer.setDown(true) })
    const token = await tokenAt(harness)
    await expectUnavailable(harness, token, '30')
    const fetchesAfterBoot = harness.issuer.jwksFetches
    expect(fetchesAfterBoot).toBe(1)
    // Retry-After counts down to the end of the cooldown; no fetch is attempted before it.
    harness.clock.advance(10_000)
    await expectUnavailable(harness, token, '20')
    expect(harness.issuer.jwksFetches).toBe(1)
    const failure = harness.gateway.logs.map((line) => JSON.parse(line) as Record<string, unknown>).find((entry) => entry.msg === 'request failed')
    expect(failure).toMatchObject({ status: 503, error: 'temporarily_unavailable' })
    expect(harness.gateway.logs.join('')).not.toContain(token)
    // The issuer comes back: the next attempt after the cooldown succeeds.
    harness.issuer.setDown(false)
    harness.clock.advance(COOLDOWN_MS)
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(2)
  })

  it('answers 503, never 500, when the JWKS URL refuses connections', async (context) => {
    const port = await closedPort()
    const harness = await start(context, { issuerExtra: { jwks_uri: `http://127.0.0.1:${port}/jwks` } })
    await expectUnavailable(harness, await tokenAt(harness), '30')
  })

  it('answers 401, not 503, for a token of an unknown issuer while the JWKS is down', async (context) => {
    const harness = await start(context, { before: (issuer) => issuer.setDown(true) })
    const token = await signWith(harness.issuer.keys[0]!, claimsAt(harness.clock, { issuer: 'https://other.example/', audience: harness.issuer.audience }))
    await expectInvalidToken(harness, token)
    expect(deniedReasons(harness.gateway)).toEqual(['unknown_issuer'])
  })
})

describe('floods of unknown kids', () => {
  it('fetches the JWKS at most once per cooldown for 50 concurrent unknown kids', async (context) => {
    const harness = await start(context)
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(1)
    const flood = async (label: string) => {
      const tokens = await Promise.all(Array.from({ length: 50 }, (_, i) => tokenAt(harness, { kid: `${label}-${i}` })))
      const responses = await Promise.all(tokens.map((token) => callOrders(harness, token)))
      for (const res of responses) {
        expect(res.status).toBe(401)
        expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
        await res.arrayBuffer()
      }
    }
    // Within the cooldown of the boot-time fetch: no fetch at all.
    await flood('early')
    expect(harness.issuer.jwksFetches).toBe(1)
    // Past the cooldown: exactly one fetch for the whole flood.
    harness.clock.advance(COOLDOWN_MS + 1)
    await flood('first')
    expect(harness.issuer.jwksFetches).toBe(2)
    await flood('second')
    expect(harness.issuer.jwksFetches).toBe(2)
    // After the next cooldown, one more fetch is allowed.
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectInvalidToken(harness, await tokenAt(harness, { kid: 'later' }))
    expect(harness.issuer.jwksFetches).toBe(3)
    await flood('third')
    expect(harness.issuer.jwksFetches).toBe(3)
    expect(harness.upstream.requests).toHaveLength(1)
    // Known keys kept working throughout.
    await expectAccepted(harness, await tokenAt(harness))
  })

  it('sends 50 concurrent first requests down one fetch when the boot fetch failed', async (context) => {
    const harness = await start(context, { before: (issuer) => issuer.setDown(true) })
    await settle(harness.issuer, 1)
    expect(harness.issuer.jwksFetches).toBe(1)
    harness.issuer.setDown(false)
    harness.clock.advance(COOLDOWN_MS + 1)
    const tokens = await Promise.all(Array.from({ length: 50 }, () => tokenAt(harness)))
    const responses = await Promise.all(tokens.map((token) => callOrders(harness, token)))
    expect(responses.map((res) => res.status)).toEqual(Array(50).fill(200))
    expect(harness.issuer.jwksFetches).toBe(2)
  })
})

describe('where the keys come from', () => {
  it('resolves jwks_uri through RFC 8414 metadata with discovery: true', async (context) => {
    const harness = await start(context, {
      issuerConfig: (issuer) => ({ issuer: issuer.issuer, discovery: true, audience: [issuer.audience], algorithms: ['ES256'] }),
    })
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(1)
  })

  it('inserts the well-known path before the issuer path (RFC 8414 §3.1)', async (context) => {
    const harness = await start(context, {
      issuerOptions: { path: '/tenants/acme' },
      issuerConfig: (issuer) => ({ issuer: issuer.issuer, discovery: true, audience: [issuer.audience] }),
    })
    expect(harness.issuer.issuer).toMatch(/\/tenants\/acme$/)
    await expectAccepted(harness, await tokenAt(harness))
  })

  it('refuses metadata whose issuer differs from the configured one (RFC 8414 §3.3): 503, keys never fetched', async (context) => {
    const harness = await start(context, {
      issuerConfig: (issuer) => ({ issuer: `${issuer.issuer}/`, discovery: true, audience: [issuer.audience] }),
    })
    const token = await signWith(harness.issuer.keys[0]!, claimsAt(harness.clock, { issuer: `${harness.issuer.issuer}/`, audience: harness.issuer.audience }))
    await expectUnavailable(harness, token, '30')
    expect(harness.issuer.jwksFetches).toBe(0)
    expect(harness.gateway.logs.some((line) => line.includes('differs'))).toBe(true)
  })

  // A key server on this machine's own non-loopback address, for a metadata document to name over http://.
  const lanAddress = Object.values(networkInterfaces()).flat().find((entry) => entry?.family === 'IPv4' && !entry.internal)?.address
  it.skipIf(lanAddress === undefined)(`refuses a discovered jwks_uri over http:// off loopback, as a configured one, unless server.allow_insecure_http${lanAddress === undefined ? ' (skipped: no non-loopback IPv4 address here)' : ''}`, async (context) => {
    const key = await createSigningKey('ES256')
    let keyFetches = 0
    const keys = http.createServer((_req, res) => { keyFetches++; res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [key.publicJwk] })) })
    await new Promise<void>((resolve) => keys.listen(0, lanAddress, resolve))
    const jwksUri = `http://${lanAddress}:${(keys.address() as AddressInfo).port}/jwks`
    // The issuer's metadata on loopback (http:// tolerated there), naming keys off loopback.
    const metadata = http.createServer((req, res) => {
      const issuer = `http://127.0.0.1:${(metadata.address() as AddressInfo).port}`
      if (req.url !== '/.well-known/oauth-authorization-server') return void res.writeHead(404).end()
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer, jwks_uri: jwksUri }))
    })
    await new Promise<void>((resolve) => metadata.listen(0, '127.0.0.1', resolve))
    context.onTestFinished(() => { keys.close(); metadata.close() })
    const issuerUrl = `http://127.0.0.1:${(metadata.address() as AddressInfo).port}`
    const issuerConfig = () => ({ issuer: issuerUrl, discovery: true, audience: ['orders-api'], algorithms: ['ES256'] })
    const refusing = await start(context, { issuerConfig })
    const token = await signWith(key, claimsAt(refusing.clock, { issuer: issuerUrl, audience: 'orders-api' }))
    await expectUnavailable(refusing, token, '30')
    expect(keyFetches).toBe(0)
    expect(refusing.gateway.logs.some((line) => line.includes(`its jwks_uri uses http:// off loopback (${lanAddress}:`))).toBe(true)
    // The same with server.allow_insecure_http: the keys are fetched from there and the token accepted.
    const allowing = await start(context, { issuerConfig, configExtra: { server: { allow_insecure_http: true } } })
    await expectAccepted(allowing, await signWith(key, claimsAt(allowing.clock, { issuer: issuerUrl, audience: 'orders-api' })))
    expect(keyFetches).toBe(1)
  })

  it('reads a static file:// JWKS', async (context) => {
    const key = await createSigningKey('ES256')
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-jwks-'))
    const file = path.join(dir, 'jwks.json')
    writeFileSync(file, JSON.stringify({ keys: [key.publicJwk] }))
    const harness = await start(context, {
      issuerConfig: () => ({ issuer: 'https://static.example.com/', jwks_uri: pathToFileURL(file).href, audience: ['orders-api'] }),
    })
    const staticIssuer = { issuer: 'https://static.example.com/', audience: 'orders-api' }
    await expectAccepted(harness, await signWith(key, claimsAt(harness.clock, staticIssuer)))
    await expectInvalidToken(harness, await signWith(await createSigningKey('ES256', key.kid), claimsAt(harness.clock, staticIssuer)))
  })

  it('reads a jwks_file relative to the config file', async (context) => {
    const key = await createSigningKey('RS256')
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-jwks-'))
    writeFileSync(path.join(dir, 'keys.json'), JSON.stringify({ keys: [key.publicJwk] }))
    const harness = await start(context, {
      issuerConfig: () => ({ issuer: 'https://static.example.com/', jwks_file: 'keys.json', audience: ['orders-api'] }),
      gatewayOptions: { dir },
    })
    await expectAccepted(harness, await signWith(key, claimsAt(harness.clock, { issuer: 'https://static.example.com/', audience: 'orders-api' })))
  })

  it('never uses an oct key from the JWKS, nor a published private key, and still uses the others', async (context) => {
    const secret = new TextEncoder().encode('a-shared-secret-of-at-least-32-bytes!!')
    const good = await createSigningKey('ES256')
    const leaked = await createSigningKey('RS256')
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-jwks-'))
    const file = path.join(dir, 'jwks.json')
    writeFileSync(file, JSON.stringify({
      keys: [
        { kty: 'oct', kid: 'shared', alg: 'HS256', use: 'sig', k: Buffer.from(secret).toString('base64url') },
        { kty: 'oct', kid: 'shared-es', alg: 'ES256', use: 'sig', k: Buffer.from(secret).toString('base64url') },
        { ...(await exportJWK(leaked.privateKey)), kid: leaked.kid, alg: 'RS256', use: 'sig' },
        good.publicJwk,
      ],
    }))
    const staticIssuer = { issuer: 'https://static.example.com/', audience: 'orders-api' }
    const harness = await start(context, {
      issuerConfig: () => ({ issuer: staticIssuer.issuer, jwks_uri: pathToFileURL(file).href, audience: ['orders-api'] }),
    })
    const hs256 = await new SignJWT(claimsAt(harness.clock, staticIssuer)).setProtectedHeader({ alg: 'HS256', kid: 'shared', typ: 'at+jwt' }).sign(secret)
    await expectInvalidToken(harness, hs256)
    await expectInvalidToken(harness, await signWith(leaked, claimsAt(harness.clock, staticIssuer)))
    await expectAccepted(harness, await signWith(good, claimsAt(harness.clock, staticIssuer)))
    expect(deniedReasons(harness.gateway)).toEqual(['algorithm_not_allowed', 'unknown_kid'])
  })
})

/** Waits (on real time) for what a background timer does. */
async function waitFor(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
  if (!condition()) throw new Error(`timed out waiting for ${what}`)
}

function keySetStats(harness: Harness) {
  return harness.gateway.app.gateway.keySetStats()[0]!
}

interface KeySetChanged { msg: string; issuer: string; reason: string; kids: string[]; previous: string[] }

function keySetChanges(gateway: RunningGateway): KeySetChanged[] {
  return gateway.logs.map((line) => JSON.parse(line) as KeySetChanged).filter((entry) => entry.msg === 'issuer key set changed')
}

/** A token with a well-formed header and claims but a signature of random bytes: the kid is looked up first. */
function forgedToken(harness: Harness, kid: string): string {
  const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  return [encode({ alg: 'ES256', kid, typ: 'at+jwt' }), encode(claimsAt(harness.clock, harness.issuer)), randomBytes(64).toString('base64url')].join('.')
}

describe('JWKS robustness (issue 3)', () => {
  it.for([
    ['30s', 30_000],
    ['250ms', 250],
  ] as const)('answers 10 000 distinct bogus kids in one second with at most one JWKS fetch per %s cooldown', async ([cooldown, cooldownMs], context) => {
    const harness = await start(context, { issuerExtra: { jwks_cooldown: cooldown } })
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(1)
    harness.clock.advance(cooldownMs + 1)
    // 50 keep-alive connections, 250 requests at a time; 25 ms of the injected second pass between batches.
    const agent = new Agent({ connections: 50 })
    context.onTestFinished(() => agent.close())
    const batches = 40
    const batchSize = 250
    for (let batch = 0; batch < batches; batch++) {
      const responses = await Promise.all(Array.from({ length: batchSize }, (_, i) => request(`${harness.gateway.url}/orders`, {
        dispatcher: agent,
        headers: { authorization: `Bearer ${forgedToken(harness, `bogus-${batch}-${i}`)}` },
      })))
      for (const res of responses) {
        expect(res.statusCode).toBe(401)
        expect(res.headers['www-authenticate']).toBe(INVALID_TOKEN_CHALLENGE)
        await res.body.dump()
      }
      harness.clock.advance(1000 / batches)
    }
    expect(harness.upstream.requests).toHaveLength(1)
    // One fetch as soon as the cooldown allows, then one per cooldown that ends within the second.
    expect(harness.issuer.jwksFetches - 1).toBe(Math.ceil(1000 / cooldownMs))
    expect(keySetStats(harness)).toMatchObject({ fetches: harness.issuer.jwksFetches, failures: 0, keys: 2 })
    const reasons = deniedReasons(harness.gateway)
    expect(reasons).toHaveLength(batches * batchSize)
    expect(new Set(reasons)).toEqual(new Set(['unknown_kid']))
    // A published key kept working, with no fetch for it.
    const fetches = harness.issuer.jwksFetches
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(fetches)
  })

  it('refreshes the key set in the background before it expires, so a rotated kid needs no unknown-kid refetch', async (context) => {
    const harness = await start(context, { issuerExtra: { jwks_max_age: '1s' } })
    await expectAccepted(harness, await tokenAt(harness))
    expect(harness.issuer.jwksFetches).toBe(1)
    // No request, and the injected clock stands still: only the refresh timer (80% of max age) can fetch.
    await waitFor(() => harness.issuer.jwksFetches >= 2, 'a background refresh')
    expect(harness.upstream.requests).toHaveLength(1)
    const fresh = await harness.issuer.rotate('ES256', true)
    const seen = harness.issuer.jwksFetches
    await waitFor(() => keySetChanges(harness.gateway).some((entry) => entry.kids.includes(fresh.kid)), 'the rotated key to be fetched')
    const fetches = harness.issuer.jwksFetches
    expect(fetches).toBeGreaterThan(seen)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    expect(harness.issuer.jwksFetches).toBe(fetches)
    const changes = keySetChanges(harness.gateway)
    expect(changes.map((entry) => entry.reason)).toEqual(['initial', 'background'])
    expect(changes[1]).toMatchObject({ issuer: harness.issuer.issuer, kids: expect.arrayContaining([fresh.kid]) })
    expect(keySetStats(harness)).toMatchObject({ failures: 0, keys: 2 })
  })

  it('serves the keys it fetched while the endpoint fails, counting the failures, and takes new ones once it is back', async (context) => {
    const harness = await start(context, { issuerExtra: { jwks_max_age: '1s' } })
    await expectAccepted(harness, await tokenAt(harness))
    harness.issuer.setDown(true)
    await waitFor(() => keySetStats(harness).failures >= 1, 'a failed background refresh')
    expect(keySetStats(harness)).toMatchObject({ fetches: 2, failures: 1, keys: 2 })
    // Tokens never seen before (so never cached): verified with the keys fetched earlier.
    harness.clock.advance(10 * 60_000)
    await expectAccepted(harness, await tokenAt(harness))
    await expectAccepted(harness, await tokenAt(harness, { key: harness.issuer.keys.find((k) => k.alg === 'RS256')! }))
    expect(harness.gateway.app.gateway.cacheStats().find((stats) => stats.name === 'jwt')).toMatchObject({ hits: 0 })
    // Past max age and past the cooldown, the first of them tried once more; the failure changed nothing.
    await waitFor(() => keySetStats(harness).failures >= 2, 'the max-age refresh to fail')
    expect(keySetStats(harness)).toMatchObject({ fetches: 3, failures: 2, keys: 2, ageMs: 10 * 60_000 })
    const warnings = harness.gateway.logs.map((line) => JSON.parse(line) as { msg: string; reason?: string })
      .filter((entry) => entry.msg === 'key set refresh failed; keeping the keys already fetched')
    expect(warnings.map((entry) => entry.reason)).toEqual(['background', 'max age'])
    // Back up, with a rotated key: the next refresh after the cooldown takes it.
    harness.issuer.setDown(false)
    const fresh = await harness.issuer.rotate('ES256', true)
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    expect(keySetStats(harness)).toMatchObject({ fetches: 4, failures: 2, keys: 2, ageMs: 0 })
  })

  it('logs the kids of a changed key set with the previous ones, and nothing when a refetch finds the same set', async (context) => {
    const harness = await start(context)
    await expectAccepted(harness, await tokenAt(harness))
    const initial = harness.issuer.keys.map((key) => key.kid).sort()
    const fresh = await harness.issuer.rotate('ES256')
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectAccepted(harness, await tokenAt(harness, { key: fresh }))
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectInvalidToken(harness, await tokenAt(harness, { kid: 'not-published' }))
    expect(harness.issuer.jwksFetches).toBe(3)
    expect(keySetChanges(harness.gateway)).toEqual([
      expect.objectContaining({ issuer: harness.issuer.issuer, reason: 'initial', kids: initial, previous: [] }),
      expect.objectContaining({ issuer: harness.issuer.issuer, reason: 'unknown kid', kids: [...initial, fresh.kid].sort(), previous: initial }),
    ])
    expect(harness.gateway.logs.filter((line) => line.includes('"msg":"issuer key set changed"')).every((line) => JSON.parse(line).level === 30)).toBe(true)
  })

  it('reports fetches, failures, key count and age in keySetStats', async (context) => {
    const harness = await start(context, { before: (issuer) => issuer.setDown(true) })
    await waitFor(() => keySetStats(harness).failures === 1, 'the boot-time fetch to fail')
    expect(harness.gateway.app.gateway.keySetStats()).toEqual([
      { issuer: harness.issuer.issuer, fetches: 1, failures: 1, keys: 0, ageMs: undefined },
    ])
    harness.issuer.setDown(false)
    harness.clock.advance(COOLDOWN_MS + 1)
    await expectAccepted(harness, await tokenAt(harness))
    expect(keySetStats(harness)).toEqual({ issuer: harness.issuer.issuer, fetches: 2, failures: 1, keys: 2, ageMs: 0 })
    harness.clock.advance(5000)
    expect(keySetStats(harness)).toMatchObject({ ageMs: 5000 })
    await harness.issuer.rotate('RS256')
    harness.clock.advance(COOLDOWN_MS)
    await expectInvalidToken(harness, await tokenAt(harness, { kid: 'not-published' }))
    expect(keySetStats(harness)).toEqual({ issuer: harness.issuer.issuer, fetches: 3, failures: 1, keys: 3, ageMs: 0 })
  })
})
