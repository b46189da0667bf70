/**
 * The verified-JWT cache end to end (issue 3, points 3, 4 and 6): a repeated token is verified once, a hit
 * still checks `exp` and the revocation hook, keys are hashes, the cache is bounded, single-flight, and
 * the invalidation hook evicts by token, hash, jti, subject and client. A cached token is told apart from
 * a verified one by withdrawing its key at the issuer and letting the gateway refetch: from then on only a
 * cache hit can accept it. Time is the gateway's injected clock.
 */
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, type TestContext } from 'vitest'
import type { JWTPayload } from 'jose'
import type { InvalidationSelector, RevocationCheck } from '../../src/authn/authenticator.js'
import type { CacheStats } from '../../src/authn/token-cache.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { signWith, startTestIssuer, type SigningKey, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { testClock, type Clock } from '../support/clock.js'
import { INVALID_TOKEN_CHALLENGE, callOrders, expectAccepted, expectInvalidToken } from '../support/harness.js'

const COOLDOWN_MS = 30_000
const SKEW_MS = 30_000

/** What a store of revoked tokens keeps: base64url SHA-256, computed here independently of src/. */
const sha256 = (token: string) => createHash('sha256').update(token).digest('base64url')


/** A JWKS endpoint serving the issuer's published keys that can hold its answers, to keep a verification in flight. */
interface GatedJwks {
  url: string
  /** Requests received, answered or not. */
  requests: number
  /** Requests held now. */
  readonly pending: number
  hold(): void
  release(): void
}

async function startGatedJwks(context: TestContext, issuer: TestIssuer): Promise<GatedJwks> {
  let held = false
  const waiting: Array<() => void> = []
  const server = http.createServer((_req, res) => {
    gate.requests++
    const answer = () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ keys: issuer.keys.map((key) => key.publicJwk) }))
    }
    if (held) waiting.push(answer)
    else answer()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  context.onTestFinished(async () => {
    gate.release()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const gate: GatedJwks = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`,
    requests: 0,
    get pending() { return waiting.length },
    hold: () => { held = true },
    release: () => {
      held = false
      for (const answer of waiting.splice(0)) answer()
    },
  }
  return gate
}

interface Harness {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  clock: Clock
  gate?: GatedJwks
}

async function start(context: TestContext, options: {
  cache?: Record<string, unknown>
  issuerExtra?: Record<string, unknown>
  isRevoked?: RevocationCheck
  /** Serve the JWKS through a gate the test can hold. */
  gated?: boolean
} = {}): Promise<Harness> {
  const clock = testClock()
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  context.onTestFinished(() => Promise.all([upstream.close(), issuer.close()]).then(() => undefined))
  const gate = options.gated ? await startGatedJwks(context, issuer) : undefined
  const config = testConfig({
    upstream,
    issuer: { ...issuer, ...(gate && { jwksUri: gate.url }) },
    ...(options.issuerExtra && { issuerExtra: options.issuerExtra }),
  })
  if (options.cache) config.cache = options.cache
  const gateway = await startGateway(config, { now: clock.now, ...(options.isRevoked && { isRevoked: options.isRevoked }) })
  context.onTestFinished(() => gateway.close())
  const harness: Harness = { upstream, issuer, gateway, clock, ...(gate && { gate }) }
  // The boot-time prefetch has ended before any test step: every fetch counted later is the test's own.
  await until(() => keySet(harness).keys > 0, 'the boot-time JWKS fetch')
  return harness
}

async function until(condition: () => boolean, what = 'condition'): Promise<void> {
  for (let i = 0; i < 300 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  if (!condition()) throw new Error(`timed out waiting for ${what}`)
}

function esKey(issuer: TestIssuer): SigningKey {
  return issuer.keys.find((key) => key.alg === 'ES256')!
}

/** A token valid at the gateway's clock, from the issuer's current ES256 key unless told otherwise. */
function tokenAt(harness: Harness, claims: JWTPayload = {}, options: { key?: SigningKey; kid?: string; expiresIn?: number } = {}): Promise<string> {
  const { clock, issuer } = harness
  const payload = {
    iss: issuer.issuer, aud: issuer.audience, sub: 'user-1', client_id: 'client-1',
    iat: clock.seconds(), exp: clock.seconds() + (options.expiresIn ?? 300), ...claims,
  }
  return signWith(options.key ?? esKey(issuer), payload, options.kid ? { kid: options.kid } : {})
}

function jwtStats(harness: Harness): CacheStats {
  const stats = harness.gateway.app.gateway.cacheStats().find((entry) => entry.name === 'jwt')
  expect(stats).toBeDefined()
  return stats!
}

function keySet(harness: Harness) {
  return harness.gateway.app.gateway.keySetStats()[0]!
}

/**
 * Withdraws every key the issuer published so far and makes the gateway fetch the new set (an unknown
 * kid past the cooldown), then takes the JWKS endpoint down: from here on no token signed before can
 * pass verification, so any such token that is accepted was a cache hit.
 */
async function withdrawKeys(harness: Harness): Promise<SigningKey> {
  const { issuer, clock } = harness
  const withdrawn = esKey(issuer)
  const fetches = keySet(harness).fetches
  const fresh = await issuer.rotate('ES256', true)
  await issuer.rotate('RS256', true)
  clock.advance(COOLDOWN_MS + 1)
  await expectInvalidToken(harness, await tokenAt(harness, {}, { key: fresh, kid: 'probe-for-a-refetch' }), 'unknown_kid')
  expect(keySet(harness)).toMatchObject({ fetches: fetches + 1, failures: 0, keys: 2 })
  issuer.setDown(true)
  return withdrawn
}

describe('verified-JWT cache', () => {
  it('verifies a repeated token once: it still passes after its key is withdrawn and the JWKS is down', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness)
    await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ hits: 0, misses: 1, size: 1 })
    const withdrawn = await withdrawKeys(harness)
    await expectAccepted(harness, token)
    await expectAccepted(harness, token)
    // The one miss since is withdrawKeys' probe, which no key could verify and which was not cached.
    expect(jwtStats(harness)).toMatchObject({ hits: 2, misses: 2, size: 1 })
    // The same key can no longer verify anything: a token the gateway has not seen is refused.
    await expectInvalidToken(harness, await tokenAt(harness, {}, { key: withdrawn }), 'unknown_kid')
    expect(keySet(harness).fetches).toBe(2)
  })

  it('rejects a cache hit once exp plus clock_skew has passed, without reaching the upstream', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness, {}, { expiresIn: 60 })
    await expectAccepted(harness, token)
    harness.clock.advance(59_000)
    await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ hits: 1, misses: 1, size: 1 })
    harness.clock.advance(1_000 + SKEW_MS + 1_000)
    await expectInvalidToken(harness, token, 'expired')
    expect(jwtStats(harness)).toMatchObject({ hits: 1, expirations: 1, size: 0 })
    await expectInvalidToken(harness, token, 'expired')
  })

  it('never serves an entry past exp: within clock_skew the token is verified again, not taken from the cache', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness, {}, { expiresIn: 60 })
    await expectAccepted(harness, token)
    await withdrawKeys(harness)  // moves the clock 30 s on
    harness.clock.advance(29_000)
    await expectAccepted(harness, token)
    // One second past exp, well inside the 30 s skew: only a verification could accept it, and its key is gone.
    harness.clock.advance(2_000)
    await expectInvalidToken(harness, token, 'unknown_kid')
    expect(jwtStats(harness)).toMatchObject({ hits: 1, expirations: 1, size: 0 })
  })

  it('does not cache a token verified inside the skew window after its exp', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness, {}, { expiresIn: 60 })
    harness.clock.advance(70_000)
    await expectAccepted(harness, token)
    await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ hits: 0, misses: 2, size: 0 })
  })

  it('keys the cache by a SHA-256 of the token: no key holds a token or any piece of one', async (context) => {
    const harness = await start(context)
    const tokens = [
      await tokenAt(harness),
      await tokenAt(harness, {}, { key: harness.issuer.keys.find((key) => key.alg === 'RS256')! }),
      await tokenAt(harness, { sub: 'user-2', jti: 'a-jti' }),
    ]
    for (const token of tokens) await expectAccepted(harness, token)
    const keys = harness.gateway.app.gateway.cacheKeys()
    expect(keys).toHaveLength(3)
    // Each key is a policy tag and the token's hash, and nothing else.
    expect(keys.map((key) => key.slice(key.indexOf(':') + 1)).sort()).toEqual(tokens.map(sha256).sort())
    for (const key of keys) {
      for (const token of tokens) {
        expect(key).not.toContain(token)
        for (const segment of token.split('.')) expect(key).not.toContain(segment)
        for (let i = 0; i + 8 <= token.length; i++) expect(key.includes(token.slice(i, i + 8))).toBe(false)
      }
    }
  })

  it('holds at most cache.max_entries tokens, evicting the least recently used and counting it', async (context) => {
    const harness = await start(context, { cache: { max_entries: 3 } })
    const tokens = await Promise.all(Array.from({ length: 5 }, (_, i) => tokenAt(harness, { jti: `jti-${i}` })))
    for (const token of tokens) await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ size: 3, maxEntries: 3, evictions: 2, misses: 5, hits: 0 })
    expect(harness.gateway.app.gateway.cacheKeys().map((key) => key.slice(key.indexOf(':') + 1)).sort())
      .toEqual(tokens.slice(2).map(sha256).sort())
    await withdrawKeys(harness)
    await expectAccepted(harness, tokens[4]!)
    await expectInvalidToken(harness, tokens[0]!, 'unknown_kid')
    await expectInvalidToken(harness, tokens[1]!, 'unknown_kid')
    expect(jwtStats(harness)).toMatchObject({ size: 3, evictions: 2, hits: 1 })
  })

  it('verifies every request when cache.jwt is false, and reports no JWT cache', async (context) => {
    const harness = await start(context, { cache: { jwt: false } })
    const token = await tokenAt(harness)
    await expectAccepted(harness, token)
    await expectAccepted(harness, token)
    expect(harness.gateway.app.gateway.cacheStats().map((stats) => stats.name)).toEqual(['introspection'])
    expect(harness.gateway.app.gateway.cacheKeys()).toEqual([])
    await withdrawKeys(harness)
    await expectInvalidToken(harness, token, 'unknown_kid')
  })

  it('sends 50 concurrent requests with one new token down one verification', async (context) => {
    const harness = await start(context, { gated: true })
    const gate = harness.gate!
    // A key the gateway has not fetched yet: verifying the token needs a JWKS fetch, which the gate holds.
    const fresh = await harness.issuer.rotate('ES256')
    harness.clock.advance(COOLDOWN_MS + 1)
    const token = await tokenAt(harness, {}, { key: fresh })
    gate.hold()
    const responses = Array.from({ length: 50 }, () => callOrders(harness, token))
    await until(() => gate.pending === 1 && jwtStats(harness).misses === 50, 'all 50 requests waiting')
    // Every request missed the cache, and all of them wait on the one verification in flight.
    expect(jwtStats(harness)).toMatchObject({ misses: 50, hits: 0, inflight: 1, size: 0 })
    expect(gate.requests).toBe(2)
    gate.release()
    for (const res of await Promise.all(responses)) {
      expect(res.status).toBe(200)
      await res.arrayBuffer()
    }
    expect(harness.upstream.requests).toHaveLength(50)
    expect(jwtStats(harness)).toMatchObject({ misses: 50, hits: 0, inflight: 0, size: 1 })
    await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ misses: 50, hits: 1 })
    expect(gate.requests).toBe(2)
  })

  it('shares a failed verification with every concurrent request for the same token', async (context) => {
    const harness = await start(context, { gated: true })
    const gate = harness.gate!
    harness.clock.advance(COOLDOWN_MS + 1)
    const token = await tokenAt(harness, {}, { kid: 'never-published' })
    gate.hold()
    const responses = Array.from({ length: 20 }, () => callOrders(harness, token))
    await until(() => gate.pending === 1 && jwtStats(harness).misses === 20, 'all 20 requests waiting')
    expect(jwtStats(harness).inflight).toBe(1)
    gate.release()
    for (const res of await Promise.all(responses)) {
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
      await res.arrayBuffer()
    }
    expect(harness.upstream.requests).toHaveLength(0)
    expect(jwtStats(harness)).toMatchObject({ inflight: 0, size: 0 })
    expect(gate.requests).toBe(2)
  })
})

describe('invalidation hook', () => {
  const alice = { jti: 'jti-alice', sub: 'alice', client_id: 'client-a' }
  const bob = { jti: 'jti-bob', sub: 'bob', client_id: 'client-b' }

  it.for<[string, (token: string) => InvalidationSelector]>([
    ['the token', (token) => ({ token })],
    ['the token hash', (token) => ({ tokenHash: sha256(token) })],
    ['jti', () => ({ jti: alice.jti })],
    ['sub', () => ({ sub: alice.sub })],
    ['client_id', () => ({ client_id: alice.client_id })],
  ])('evicts by %s: the evicted token is verified again (and now refused), the other stays cached', async ([_name, selectorFor], context) => {
    const harness = await start(context)
    const [aliceToken, bobToken] = await Promise.all([tokenAt(harness, alice), tokenAt(harness, bob)])
    await expectAccepted(harness, aliceToken)
    await expectAccepted(harness, bobToken)
    await withdrawKeys(harness)
    // Both are served from the cache although their key is gone.
    await expectAccepted(harness, aliceToken)
    await expectAccepted(harness, bobToken)
    expect(harness.gateway.app.gateway.invalidate(selectorFor(aliceToken))).toBe(1)
    expect(jwtStats(harness)).toMatchObject({ invalidations: 1, size: 1 })
    expect(harness.gateway.app.gateway.cacheKeys().map((key) => key.slice(key.indexOf(':') + 1))).toEqual([sha256(bobToken)])
    await expectInvalidToken(harness, aliceToken, 'unknown_kid')
    await expectAccepted(harness, bobToken)
  })

  it('evicts every token of a subject at once, and of a client across subjects', async (context) => {
    const harness = await start(context)
    const tokens = await Promise.all([
      tokenAt(harness, { ...alice, jti: 'a-1' }),
      tokenAt(harness, { ...alice, jti: 'a-2' }),
      tokenAt(harness, { ...bob, client_id: alice.client_id }),
      tokenAt(harness, bob),
    ])
    for (const token of tokens) await expectAccepted(harness, token)
    await withdrawKeys(harness)
    const { gateway } = harness.gateway.app
    expect(gateway.invalidate({ sub: 'alice' })).toBe(2)
    await expectInvalidToken(harness, tokens[0]!, 'unknown_kid')
    await expectInvalidToken(harness, tokens[1]!, 'unknown_kid')
    await expectAccepted(harness, tokens[2]!)
    expect(gateway.invalidate({ client_id: alice.client_id })).toBe(1)
    await expectInvalidToken(harness, tokens[2]!, 'unknown_kid')
    await expectAccepted(harness, tokens[3]!)
    expect(jwtStats(harness)).toMatchObject({ invalidations: 3, size: 1 })
  })

  it('drops nothing for a selector that matches no cached token', async (context) => {
    const harness = await start(context)
    const token = await tokenAt(harness, alice)
    await expectAccepted(harness, token)
    const { gateway } = harness.gateway.app
    expect(gateway.invalidate({})).toBe(0)
    expect(gateway.invalidate({ jti: 'other', sub: 'other', client_id: 'other' })).toBe(0)
    expect(gateway.invalidate({ token: `${token}x` })).toBe(0)
    expect(jwtStats(harness)).toMatchObject({ invalidations: 0, size: 1 })
  })

  it.for<[string, (token: string) => InvalidationSelector]>([
    ['sub', () => ({ sub: alice.sub })],
    ['token hash', (token) => ({ tokenHash: sha256(token) })],
  ])('does not let a verification in flight put back a token invalidated meanwhile by %s', async ([_name, selectorFor], context) => {
    const harness = await start(context, { gated: true })
    const gate = harness.gate!
    const fresh = await harness.issuer.rotate('ES256')
    harness.clock.advance(COOLDOWN_MS + 1)
    const token = await tokenAt(harness, alice, { key: fresh })
    gate.hold()
    const response = callOrders(harness, token)
    await until(() => gate.pending === 1 && jwtStats(harness).inflight === 1, 'the verification in flight')
    expect(harness.gateway.app.gateway.invalidate(selectorFor(token))).toBe(0)
    gate.release()
    // The request that was waiting is answered (its token verified before the answer), but nothing is cached.
    const res = await response
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    expect(jwtStats(harness)).toMatchObject({ size: 0, inflight: 0 })
    expect(harness.gateway.app.gateway.cacheKeys()).toEqual([])
  })
})

describe('revocation hook', () => {
  it('rejects a revoked jti even on a cache hit, and accepts it again from the cache once unrevoked', async (context) => {
    const revoked = new Set<string>()
    const seen: Array<{ jti: unknown; hash: string }> = []
    const harness = await start(context, {
      isRevoked: (principal, hash) => {
        seen.push({ jti: principal.jti, hash })
        return revoked.has(String(principal.jti))
      },
    })
    const token = await tokenAt(harness, { jti: 'jti-revoked' })
    const other = await tokenAt(harness, { jti: 'jti-kept' })
    await expectAccepted(harness, token)
    await expectAccepted(harness, other)
    revoked.add('jti-revoked')
    await expectInvalidToken(harness, token, 'revoked')
    await expectInvalidToken(harness, token, 'revoked')
    await expectAccepted(harness, other)
    // Cache hits all three: the hook, not a verification, refused the token.
    expect(jwtStats(harness)).toMatchObject({ hits: 3, misses: 2, size: 2 })
    expect(seen).toEqual([
      { jti: 'jti-revoked', hash: sha256(token) },
      { jti: 'jti-kept', hash: sha256(other) },
      { jti: 'jti-revoked', hash: sha256(token) },
      { jti: 'jti-revoked', hash: sha256(token) },
      { jti: 'jti-kept', hash: sha256(other) },
    ])
    revoked.delete('jti-revoked')
    await expectAccepted(harness, token)
    expect(jwtStats(harness)).toMatchObject({ hits: 4, misses: 2 })
  })

  it('rejects a token whose hash is revoked, on its first request and on cache hits', async (context) => {
    const revokedHashes = new Set<string>()
    const harness = await start(context, { isRevoked: (_principal, hash) => revokedHashes.has(hash) })
    const token = await tokenAt(harness)
    revokedHashes.add(sha256(token))
    await expectInvalidToken(harness, token, 'revoked')
    await expectInvalidToken(harness, token, 'revoked')
    expect(jwtStats(harness)).toMatchObject({ hits: 1, misses: 1 })
    await expectAccepted(harness, await tokenAt(harness))
  })
})
