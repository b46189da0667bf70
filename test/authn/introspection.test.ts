/**
 * RFC 7662 introspection of opaque tokens through the real gateway: a real introspection endpoint on
 * loopback that counts its calls and checks the gateway's client credentials, a recording upstream, and
 * the gateway's clock injected so cache lifetimes are moved, not waited for. Every rejection asserts the
 * status, the challenge, the JSON body, the logged reason and that nothing reached the upstream.
 */
import { createHash, randomBytes } from 'node:crypto'
import http from 'node:http'
import { describe, expect, it, type TestContext } from 'vitest'
import type { CacheStats } from '../../src/authn/token-cache.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startIntrospectionServer, type IntrospectionServerOptions, type TestIntrospectionServer } from '../support/introspection.js'
import { startTestIssuer } from '../support/issuer.js'
import { createTestCa } from '../support/tls.js'
import { startRecordingUpstream, type RecordedRequest, type RecordingUpstream } from '../support/upstream.js'

const ISSUER = 'https://idp.example.test/'
const AUDIENCE = 'orders-api'
const INVALID_TOKEN_CHALLENGE = 'Bearer realm="test", error="invalid_token", error_description="the access token is invalid or expired"'
const INVALID_TOKEN_BODY = { error: 'invalid_token', error_description: 'the access token is invalid or expired' }
const UNAVAILABLE_BODY = { error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' }

interface Clock { ms: number }

interface Setup {
  upstream: RecordingUpstream
  idp: TestIntrospectionServer
  gateway: RunningGateway
  /** The gateway's clock: tests move it instead of waiting. */
  clock: Clock
  call(token: string, path?: string): Promise<Response>
  /** The introspection cache's statistics. */
  stats(): CacheStats
}

interface SetupOptions {
  /** Merged into `issuers[0].introspection`. */
  introspection?: Record<string, unknown>
  /** Merged into `issuers[0]`. */
  issuer?: Record<string, unknown>
  /** Replaces the issuer list (built with {@link introspectingIssuer}). */
  issuers?: (idp: TestIntrospectionServer) => Record<string, unknown>[]
  cache?: Record<string, unknown>
  routes?: Record<string, unknown>[]
  idp?: IntrospectionServerOptions
  /** Merged into the upstream's settings. */
  upstream?: Record<string, unknown>
}

/** An issuer that has introspection and no key source. */
function introspectingIssuer(idp: TestIntrospectionServer, extra: Record<string, unknown> = {},
  introspection: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    issuer: ISSUER,
    audience: [AUDIENCE],
    ...extra,
    introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, ...introspection },
  }
}

async function setup(context: TestContext, options: SetupOptions = {}): Promise<Setup> {
  const [upstream, idp] = await Promise.all([startRecordingUpstream(), startIntrospectionServer(options.idp)])
  const clock: Clock = { ms: Date.now() }
  const issuers = options.issuers?.(idp) ?? [introspectingIssuer(idp, options.issuer, options.introspection)]
  const config = {
    ...testConfig({ upstream, upstreamExtra: options.upstream, ...(options.routes && { routes: options.routes }) }),
    issuers,
    ...(options.cache && { cache: options.cache }),
  }
  const gateway = await startGateway(config, { now: () => clock.ms })
  context.onTestFinished(async () => {
    await gateway.close()
    await Promise.all([upstream.close(), idp.close()])
  })
  return {
    upstream, idp, gateway, clock,
    call: (token, path = '/orders/1') => fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${token}` } }),
    stats: () => gateway.app.gateway.cacheStats().find((stats) => stats.name === 'introspection')!,
  }
}

/** A fresh opaque token (not three base64url segments), optionally with a prefix. */
function opaqueToken(prefix = 'op_'): string {
  return prefix + randomBytes(24).toString('base64url')
}

const seconds = (clock: Clock) => Math.floor(clock.ms / 1000)

/** An RFC 7662 §2.2 answer for a token the gateway should accept. */
function activeAnswer(clock: Clock, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    active: true,
    iss: ISSUER,
    aud: AUDIENCE,
    sub: 'user-1',
    client_id: 'client-1',
    scope: 'orders:read orders:write',
    token_type: 'Bearer',
    iat: seconds(clock) - 10,
    exp: seconds(clock) + 3600,
    ...extra,
  }
}

function logEntries(gateway: RunningGateway): Array<{ msg?: string; reason?: unknown; level?: number }> {
  return gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown; level?: number })
}

function lastReason(gateway: RunningGateway, msg: 'request denied' | 'request failed'): unknown {
  return logEntries(gateway).filter((entry) => entry.msg === msg).at(-1)?.reason
}

/** 200, one upstream request; returns its headers and forgets it. */
async function expectAccepted(s: Setup, token: string, path?: string): Promise<RecordedRequest['headers']> {
  const res = await s.call(token, path)
  expect(res.status).toBe(200)
  expect(s.upstream.requests).toHaveLength(1)
  const headers = s.upstream.requests[0]!.headers
  s.upstream.requests.length = 0
  return headers
}

/** 401 invalid_token, the generic challenge and body, the precise reason in the log, the token nowhere. */
async function expectInvalidToken(s: Setup, token: string, reason: string): Promise<void> {
  const res = await s.call(token)
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  expect(await res.json()).toEqual(INVALID_TOKEN_BODY)
  expect(s.upstream.requests).toHaveLength(0)
  expect(lastReason(s.gateway, 'request denied')).toBe(reason)
  const logs = s.gateway.logs.join('')
  expect(logs).not.toContain(token)
  expect(logs).not.toContain(s.idp.clientSecret)
}

/** 503 temporarily_unavailable with Retry-After and no challenge: fail closed. */
async function expectUnavailable(s: Setup, token: string): Promise<void> {
  const res = await s.call(token)
  expect(res.status).toBe(503)
  expect(res.headers.get('www-authenticate')).toBeNull()
  expect(res.headers.get('retry-after')).toBe('1')
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  expect(await res.json()).toEqual(UNAVAILABLE_BODY)
  expect(s.upstream.requests).toHaveLength(0)
  expect(lastReason(s.gateway, 'request failed')).toBe('introspection_unavailable')
  // A failure's line (pino's, with the stack) carries a request id too: a UUID when the request sent none.
  const failed = s.gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reqId?: unknown }).filter((entry) => entry.msg === 'request failed').at(-1)
  expect(failed?.reqId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  const logs = s.gateway.logs.join('')
  expect(logs).not.toContain(token)
  expect(logs).not.toContain(s.idp.clientSecret)
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((settle) => { resolve = settle })
  return { promise, resolve }
}

async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

const sha256 = (token: string) => createHash('sha256').update(token).digest('base64url')

describe('introspection answers', () => {
  it('accepts an active token and forwards sub, client_id, scope and the issuer as identity headers', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    const headers = await expectAccepted(s, token)
    expect(headers['x-auth-subject']).toBe('user-1')
    expect(headers['x-auth-client-id']).toBe('client-1')
    expect(headers['x-auth-scopes']).toBe('orders:read orders:write')
    expect(headers['x-auth-issuer']).toBe(ISSUER)
    expect(s.idp.calls).toHaveLength(1)
    const call = s.idp.calls[0]!
    expect(call).toMatchObject({ method: 'POST', path: '/introspect', token, tokenTypeHint: 'access_token', authenticated: true })
    expect(call.contentType).toBe('application/x-www-form-urlencoded')
    expect(call.accept).toBe('application/json')
    expect(s.gateway.logs.join('')).not.toContain(token)
  })

  it('accepts an active answer without exp, iss or aud (each is checked only when present)', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, { active: true, sub: 'user-2' })
    const headers = await expectAccepted(s, token)
    expect(headers['x-auth-subject']).toBe('user-2')
    expect(headers['x-auth-client-id']).toBeUndefined()
    expect(headers['x-auth-scopes']).toBe('')
  })

  it('answers 401 invalid_token for an inactive token', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, { active: false })
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(1)
  })

  it('answers 401 for a token the endpoint does not know (its default inactive answer)', async (context) => {
    const s = await setup(context)
    await expectInvalidToken(s, opaqueToken(), 'inactive')
  })

  it('answers 401 for an active answer whose exp has passed', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { exp: seconds(s.clock) - 3600 }))
    await expectInvalidToken(s, token, 'expired')
  })

  it('accepts an active answer expired by less than clock_skew, refuses one expired by more', async (context) => {
    const s = await setup(context, { issuer: { clock_skew: '1m' } })
    const recent = opaqueToken()
    const old = opaqueToken()
    s.idp.answerJson(recent, activeAnswer(s.clock, { exp: seconds(s.clock) - 30 }))
    s.idp.answerJson(old, activeAnswer(s.clock, { exp: seconds(s.clock) - 90 }))
    await expectAccepted(s, recent)
    await expectInvalidToken(s, old, 'expired')
  })

  it('answers 401 for an active answer whose aud is not a configured audience', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { aud: 'billing-api' }))
    await expectInvalidToken(s, token, 'wrong_audience')
  })

  it('accepts an aud array containing one configured audience', async (context) => {
    const s = await setup(context, { issuer: { audience: ['orders-api', 'orders-admin'] } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { aud: ['billing-api', 'orders-admin'] }))
    await expectAccepted(s, token)
  })

  it('answers 401 for an aud array containing none of the configured audiences', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { aud: ['billing-api', 'orders-api-2'] }))
    await expectInvalidToken(s, token, 'wrong_audience')
  })

  it('answers 401 for an active answer naming another iss', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { iss: 'https://evil.example.test/' }))
    await expectInvalidToken(s, token, 'wrong_issuer')
  })

  it('answers 401 for an answer without active', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    const { active: _active, ...withoutActive } = activeAnswer(s.clock)
    s.idp.answerJson(token, withoutActive)
    await expectInvalidToken(s, token, 'introspection_malformed')
  })

  it.for([['the string "true"', 'true'], ['the number 1', 1], ['null', null]] as const)(
    'answers 401 for an answer whose active is %s', async ([, active], context) => {
      const s = await setup(context)
      const token = opaqueToken()
      s.idp.answerJson(token, activeAnswer(s.clock, { active }))
      await expectInvalidToken(s, token, 'introspection_malformed')
    })

  it('answers 401 for a 200 answer that is not JSON', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answer(token, { text: '<html><body>Welcome to the login page</body></html>' })
    await expectInvalidToken(s, token, 'introspection_malformed')
  })

  it('answers 401 for JSON that is not an object (null, an array, a string)', async (context) => {
    const s = await setup(context)
    for (const json of [null, [true], 'active']) {
      const token = opaqueToken()
      s.idp.answer(token, { json })
      await expectInvalidToken(s, token, 'introspection_malformed')
    }
  })

  it('answers 401 invalid_token when the endpoint answers 500, even with an active body', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answer(token, { status: 500, json: activeAnswer(s.clock) })
    await expectInvalidToken(s, token, 'introspection_status_500')
  })

  it('issue 3 regression: answers 401, not 503, for an answer over 64 KiB, and does not cache it', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { padding: 'x'.repeat(70 * 1024) }))
    await expectInvalidToken(s, token, 'introspection_too_large')
    s.idp.answerJson(token, activeAnswer(s.clock, { padding: 'x'.repeat(60 * 1024) }))
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(2)
  })

  it('answers 401 for a malformed scope claim in an active answer', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { scope: ['orders:read'] }))
    await expectInvalidToken(s, token, 'bad_scope_claim')
  })
})

describe('client authentication to the introspection endpoint', () => {
  // Characters that RFC 6749 §2.3.1 form-encoding must protect: ':' would split Basic, '+' and '%' would decode wrongly.
  const idp = { clientId: 'gateway:edge one', clientSecret: 'p@ss word+/%&=é:x' }

  it('uses client_secret_basic by default, form-encoding id and secret before base64 (RFC 6749 §2.3.1)', async (context) => {
    const s = await setup(context, { idp })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    const call = s.idp.calls[0]!
    expect(call).toMatchObject({ authMethod: 'client_secret_basic', clientId: idp.clientId, clientSecret: idp.clientSecret, authenticated: true })
    const encoded = 'gateway%3Aedge+one:p%40ss+word%2B%2F%25%26%3D%C3%A9%3Ax'
    expect(call.authorization).toBe(`Basic ${Buffer.from(encoded).toString('base64')}`)
    expect(call.form).toEqual({ token, token_type_hint: 'access_token' })
  })

  it('sends client_id and client_secret in the form with client_secret_post, and no Authorization header', async (context) => {
    const s = await setup(context, { idp, introspection: { auth_method: 'client_secret_post' } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    const call = s.idp.calls[0]!
    expect(call.authorization).toBeUndefined()
    expect(call).toMatchObject({ authMethod: 'client_secret_post', authenticated: true })
    expect(call.form).toEqual({ token, token_type_hint: 'access_token', client_id: idp.clientId, client_secret: idp.clientSecret })
  })

  it.for(['client_secret_basic', 'client_secret_post'])('never logs the client secret with %s, not even when the endpoint fails', async (method, context) => {
    const s = await setup(context, { idp, introspection: { auth_method: method } })
    const [active, inactive, broken, down] = [opaqueToken(), opaqueToken(), opaqueToken(), opaqueToken()]
    s.idp.answerJson(active, activeAnswer(s.clock))
    s.idp.answer(broken, { status: 500, text: 'oops' })
    await expectAccepted(s, active)
    await expectInvalidToken(s, inactive, 'inactive')
    await expectInvalidToken(s, broken, 'introspection_status_500')
    await s.idp.stop()
    await expectUnavailable(s, down)
    const logs = s.gateway.logs.join('')
    expect(logs).toContain('introspection endpoint unreachable')
    for (const secret of [idp.clientSecret, encodeURIComponent(idp.clientSecret), 'p%40ss', s.idp.calls[0]!.authorization ?? 'Basic ']) {
      expect(logs).not.toContain(secret)
    }
    for (const token of [active, inactive, broken, down]) expect(logs).not.toContain(token)
  })

  it('answers 401 invalid_token when the endpoint refuses the gateway\'s credentials', async (context) => {
    const s = await setup(context, { introspection: { client_secret: 'not-the-secret' } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectInvalidToken(s, token, 'introspection_status_401')
    expect(s.idp.calls[0]!.authenticated).toBe(false)
  })
})

describe('introspection cache', () => {
  it('serves a second request with the same token from the cache, without a new call', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    const headers = await expectAccepted(s, token)
    expect(headers['x-auth-subject']).toBe('user-1')
    expect(s.idp.callCount).toBe(1)
  })

  it('calls again once the default 60s cache_ttl has passed', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { exp: seconds(s.clock) + 86_400 }))
    await expectAccepted(s, token)
    s.clock.ms += 59_000
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
    s.clock.ms += 1_000
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(2)
  })

  it('uses the configured cache_ttl, and a token revoked meanwhile is refused once it has passed', async (context) => {
    const s = await setup(context, { introspection: { cache_ttl: '10s' } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    s.idp.answerJson(token, { active: false })
    s.clock.ms += 9_999
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
    s.clock.ms += 1
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(2)
  })

  it('never keeps a positive answer past the token\'s exp, even with a long cache_ttl', async (context) => {
    const s = await setup(context, { introspection: { cache_ttl: '1h' } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { exp: seconds(s.clock) + 10 }))
    await expectAccepted(s, token)
    s.clock.ms += 5_000
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
    s.idp.answerJson(token, { active: false })
    s.clock.ms += 6_000
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(2)
  })

  it('shares one introspection call among 100 concurrent requests carrying the same new token', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    const release = deferred()
    s.idp.answer(token, { json: activeAnswer(s.clock), holdUntil: release.promise })
    const responses = Array.from({ length: 100 }, () => s.call(token))
    // Every request has looked in the cache and is waiting on the one call in flight.
    await until(() => s.stats().misses === 100, '100 cache misses')
    expect(s.stats().inflight).toBe(1)
    expect(s.idp.callCount).toBe(1)
    release.resolve()
    const statuses = await Promise.all(responses.map(async (response) => (await response).status))
    expect(statuses).toEqual(Array(100).fill(200))
    expect(s.idp.callCount).toBe(1)
    expect(s.upstream.requests).toHaveLength(100)
    expect(s.stats()).toMatchObject({ hits: 0, misses: 100, inflight: 0, size: 1 })
  })

  it('holds an inactive answer for the default 5s negative_cache_ttl, then calls again', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, { active: false })
    await expectInvalidToken(s, token, 'inactive')
    // The endpoint now says active, but the negative answer stands until it expires.
    s.idp.answerJson(token, activeAnswer(s.clock))
    s.clock.ms += 4_999
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(1)
    s.clock.ms += 1
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(2)
  })

  it('uses the configured negative_cache_ttl, for answers the gateway itself refused too', async (context) => {
    const s = await setup(context, { introspection: { negative_cache_ttl: '30s' } })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { aud: 'billing-api' }))
    await expectInvalidToken(s, token, 'wrong_audience')
    s.clock.ms += 29_000
    await expectInvalidToken(s, token, 'wrong_audience')
    expect(s.idp.callCount).toBe(1)
    s.clock.ms += 1_000
    await expectInvalidToken(s, token, 'wrong_audience')
    expect(s.idp.callCount).toBe(2)
  })

  it.for([
    ['a 500 answer', { status: 500, json: { active: true } }, 'introspection_status_500'],
    ['a non-JSON answer', { text: 'Service Unavailable' }, 'introspection_malformed'],
    ['an answer without active', { json: { sub: 'user-1' } }, 'introspection_malformed'],
  ] as const)('does not cache %s: the next request calls again and gets the real answer', async ([, answer, reason], context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answer(token, answer)
    await expectInvalidToken(s, token, reason)
    await expectInvalidToken(s, token, reason)
    expect(s.idp.callCount).toBe(2)
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(3)
    expect(s.stats().size).toBe(1)
  })

  it('never holds a raw token: every key is an issuer tag and the SHA-256 of the token', async (context) => {
    const s = await setup(context)
    const tokens = [opaqueToken(), opaqueToken(), opaqueToken()]
    s.idp.answerJson(tokens[0]!, activeAnswer(s.clock))
    s.idp.answerJson(tokens[1]!, { active: false })
    s.idp.answerJson(tokens[2]!, activeAnswer(s.clock, { sub: 'user-3' }))
    await expectAccepted(s, tokens[0]!)
    await expectInvalidToken(s, tokens[1]!, 'inactive')
    await expectAccepted(s, tokens[2]!)
    const keys = s.gateway.app.gateway.cacheKeys()
    expect(keys).toHaveLength(3)
    for (const key of keys) {
      expect(key).toMatch(/^[A-Za-z0-9_-]{16}:[A-Za-z0-9_-]{43}$/)
      for (const token of tokens) {
        expect(key).not.toContain(token)
        expect(key).not.toContain(token.slice(3, 20))
      }
    }
    expect(keys.map((key) => key.split(':')[1]).sort()).toEqual(tokens.map(sha256).sort())
  })

  it('is bounded by cache.max_entries: the least recently used answer is evicted and introspected again', async (context) => {
    const s = await setup(context, { cache: { max_entries: 2 } })
    const [a, b, c] = [opaqueToken(), opaqueToken(), opaqueToken()]
    for (const token of [a, b, c]) s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, a)
    await expectAccepted(s, b)
    await expectAccepted(s, a)
    await expectAccepted(s, c)
    expect(s.stats()).toMatchObject({ size: 2, maxEntries: 2, evictions: 1 })
    expect(s.idp.callCount).toBe(3)
    await expectAccepted(s, a)
    expect(s.idp.callCount).toBe(3)
    await expectAccepted(s, b)
    expect(s.idp.callCount).toBe(4)
  })

  it('counts hits, misses, expirations, invalidations, size and the calls in flight', async (context) => {
    const s = await setup(context, { cache: { max_entries: 1000 } })
    expect(s.stats()).toEqual({
      name: 'introspection', hits: 0, misses: 0, evictions: 0, expirations: 0, invalidations: 0, size: 0, maxEntries: 1000, inflight: 0,
    })
    const [first, second] = [opaqueToken(), opaqueToken()]
    s.idp.answerJson(first, activeAnswer(s.clock))
    await expectAccepted(s, first)
    expect(s.stats()).toMatchObject({ hits: 0, misses: 1, size: 1, inflight: 0 })
    await expectAccepted(s, first)
    await expectAccepted(s, first)
    expect(s.stats()).toMatchObject({ hits: 2, misses: 1, size: 1 })

    const release = deferred()
    s.idp.answer(second, { json: activeAnswer(s.clock, { sub: 'user-2' }), holdUntil: release.promise })
    const pending = s.call(second)
    await s.idp.waitForCalls(2)
    expect(s.stats()).toMatchObject({ misses: 2, inflight: 1, size: 1 })
    release.resolve()
    expect((await pending).status).toBe(200)
    s.upstream.requests.length = 0
    expect(s.stats()).toMatchObject({ hits: 2, misses: 2, inflight: 0, size: 2 })

    expect(s.gateway.app.gateway.invalidate({ token: first })).toBe(1)
    expect(s.stats()).toMatchObject({ invalidations: 1, size: 1 })
    s.clock.ms += 61_000
    await expectAccepted(s, second)
    expect(s.stats()).toMatchObject({ hits: 2, misses: 3, expirations: 1, evictions: 0, size: 1 })
  })
})

describe('introspection endpoint down or slow', () => {
  it('answers 503 temporarily_unavailable with Retry-After while the endpoint is down, then 200 once it is back', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock))
    await s.idp.stop()
    await expectUnavailable(s, token)
    // Fail closed every time: the failure is not cached, and not turned into an answer either.
    await expectUnavailable(s, token)
    expect(s.stats()).toMatchObject({ size: 0, inflight: 0 })
    await s.idp.start()
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
  })

  it('keeps serving a token answered before the endpoint went down, and refuses new ones with 503', async (context) => {
    const s = await setup(context)
    const [known, fresh] = [opaqueToken(), opaqueToken()]
    s.idp.answerJson(known, activeAnswer(s.clock))
    s.idp.answerJson(fresh, activeAnswer(s.clock))
    await expectAccepted(s, known)
    await s.idp.stop()
    await expectAccepted(s, known)
    await expectUnavailable(s, fresh)
  })

  it('answers 503 when the endpoint is slower than timeout, then serves the next request normally', async (context) => {
    const s = await setup(context, { introspection: { timeout: '300ms' } })
    const token = opaqueToken()
    s.idp.answer(token, { json: activeAnswer(s.clock), delayMs: 3_000 })
    const started = Date.now()
    await expectUnavailable(s, token)
    const elapsed = Date.now() - started
    expect(elapsed).toBeGreaterThanOrEqual(250)
    expect(elapsed).toBeLessThan(2_000)
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(2)
  })

  it('forwards nothing for a client that left while its token was introspected, and spends no upstream connection on it', async (context) => {
    // One upstream connection: a request left holding it would stall every later one.
    const s = await setup(context, { upstream: { connections: 1 } })
    const token = opaqueToken()
    const release = deferred()
    s.idp.answer(token, { json: activeAnswer(s.clock), holdUntil: release.promise })
    const gone = http.get(`${s.gateway.url}/orders/1`, { agent: false, headers: { authorization: `Bearer ${token}` } })
    gone.on('error', () => {})
    await s.idp.waitForCalls(1)
    gone.destroy()
    // Let the gateway see the connection close before the answer arrives.
    await new Promise((resolve) => setTimeout(resolve, 100))
    release.resolve()
    await until(() => logEntries(s.gateway).some((entry) => entry.msg === 'request'), 'the request logged')
    expect(logEntries(s.gateway).find((entry) => entry.msg === 'request')).toMatchObject({ status: 499 })
    expect(s.upstream.requests).toHaveLength(0)
    // The answer was cached: the next request with the token is forwarded on the one connection, the first
    // the upstream ever saw (none was opened, and closed again, for the client that had left).
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
    expect(s.upstream.connections).toBe(1)
  })

  it('gives up after the default 2s timeout', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    s.idp.answer(token, { json: activeAnswer(s.clock), delayMs: 6_000 })
    const started = Date.now()
    await expectUnavailable(s, token)
    const elapsed = Date.now() - started
    expect(elapsed).toBeGreaterThanOrEqual(1_900)
    expect(elapsed).toBeLessThan(4_000)
  })

  it('answers 503 to every request sharing a call that fails, and does not cache the failure', async (context) => {
    const s = await setup(context, { introspection: { timeout: '300ms' } })
    const token = opaqueToken()
    s.idp.answer(token, { json: activeAnswer(s.clock), delayMs: 3_000 })
    const responses = await Promise.all(Array.from({ length: 10 }, () => s.call(token)))
    for (const res of responses) {
      expect(res.status).toBe(503)
      expect(res.headers.get('www-authenticate')).toBeNull()
      expect(res.headers.get('retry-after')).toBe('1')
      expect(await res.json()).toEqual(UNAVAILABLE_BODY)
    }
    expect(s.idp.callCount).toBe(1)
    expect(s.upstream.requests).toHaveLength(0)
    s.idp.answerJson(token, activeAnswer(s.clock))
    await expectAccepted(s, token)
  })
})

describe('introspection over HTTPS', () => {
  it('trusts a private CA given as ca_file, and fails closed with 503 without it', async (context) => {
    const ca = createTestCa()
    context.onTestFinished(() => ca.remove())
    const { cert, key } = ca.issue('introspection')
    const trusting = await setup(context, { idp: { tls: { cert, key } }, introspection: { ca_file: ca.caFile } })
    expect(trusting.idp.endpoint).toMatch(/^https:\/\//)
    const token = opaqueToken()
    trusting.idp.answerJson(token, activeAnswer(trusting.clock))
    await expectAccepted(trusting, token)

    const untrusting = await setup(context, { idp: { tls: { cert, key } } })
    untrusting.idp.answerJson(token, activeAnswer(untrusting.clock))
    await expectUnavailable(untrusting, token)
    expect(untrusting.idp.callCount).toBe(0)
  })
})

describe('which issuer introspects a token', () => {
  const SECOND = 'https://partners.example.test/'

  async function twoIssuers(context: TestContext) {
    const other = await startIntrospectionServer({ clientId: 'gateway-b', clientSecret: 'secret-b' })
    context.onTestFinished(() => other.close())
    const s = await setup(context, {
      issuers: (idp) => [
        introspectingIssuer(idp, {}, { token_prefix: 'a_' }),
        introspectingIssuer(other, { issuer: SECOND, audience: ['partner-api'] }, { token_prefix: 'b_' }),
      ],
    })
    return { s, other }
  }

  it('sends an opaque token to the issuer whose token_prefix it carries', async (context) => {
    const { s, other } = await twoIssuers(context)
    const [a, b] = [opaqueToken('a_'), opaqueToken('b_')]
    s.idp.answerJson(a, activeAnswer(s.clock))
    other.answerJson(b, activeAnswer(s.clock, { iss: SECOND, aud: 'partner-api', sub: 'partner-7' }))
    expect((await expectAccepted(s, a))['x-auth-issuer']).toBe(ISSUER)
    const headers = await expectAccepted(s, b)
    expect(headers['x-auth-issuer']).toBe(SECOND)
    expect(headers['x-auth-subject']).toBe('partner-7')
    expect(s.idp.calls.map((call) => call.token)).toEqual([a])
    expect(other.calls.map((call) => call.token)).toEqual([b])
    expect(other.calls[0]!.authenticated).toBe(true)
  })

  it('keeps the answers of two issuers apart in the cache', async (context) => {
    const { s, other } = await twoIssuers(context)
    const [a, b] = [opaqueToken('a_'), opaqueToken('b_')]
    s.idp.answerJson(a, activeAnswer(s.clock))
    other.answerJson(b, { active: false })
    await expectAccepted(s, a)
    await expectInvalidToken(s, b, 'inactive')
    const prefixes = new Set(s.gateway.app.gateway.cacheKeys().map((key) => key.split(':')[0]))
    expect(prefixes.size).toBe(2)
  })

  it('answers 401 for an opaque token no introspecting issuer accepts, without calling any', async (context) => {
    const { s, other } = await twoIssuers(context)
    await expectInvalidToken(s, opaqueToken('c_'), 'no_introspecting_issuer')
    expect(s.idp.callCount + other.callCount).toBe(0)
  })

  it('introspects a JWT whose iss names an issuer that has only introspection', async (context) => {
    const s = await setup(context)
    const signer = await startTestIssuer()
    context.onTestFinished(() => signer.close())
    const jwt = await signer.sign({ iss: ISSUER, sub: 'jwt-user' })
    expect(jwt.split('.')).toHaveLength(3)
    s.idp.answerJson(jwt, activeAnswer(s.clock, { sub: 'jwt-user' }))
    expect((await expectAccepted(s, jwt))['x-auth-subject']).toBe('jwt-user')
    expect(s.idp.calls.map((call) => call.token)).toEqual([jwt])
    await expectAccepted(s, jwt)
    expect(s.idp.callCount).toBe(1)
    expect(s.gateway.app.gateway.cacheKeys().some((key) => key.includes(jwt.split('.')[2]!))).toBe(false)
  })

  it('answers 401 for a JWT whose iss names no configured issuer, without introspecting it', async (context) => {
    const s = await setup(context)
    const signer = await startTestIssuer()
    context.onTestFinished(() => signer.close())
    const jwt = await signer.sign()
    s.idp.answerJson(jwt, activeAnswer(s.clock))
    await expectInvalidToken(s, jwt, 'unknown_issuer')
    expect(s.idp.callCount).toBe(0)
  })

  it('introspects an opaque token for an issuer that also has a JWKS', async (context) => {
    const signer = await startTestIssuer()
    context.onTestFinished(() => signer.close())
    const s = await setup(context, {
      issuers: (idp) => [{ ...introspectingIssuer(idp), issuer: signer.issuer, jwks_uri: signer.jwksUri, algorithms: ['ES256'] }],
    })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { iss: signer.issuer }))
    await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(1)
    // A JWT of that issuer is verified with its keys, not introspected.
    await expectAccepted(s, await signer.sign())
    expect(s.idp.callCount).toBe(1)
  })
})

describe('invalidation of introspection answers', () => {
  it('evicts one token by the token itself or by its hash, so the next request calls again', async (context) => {
    const s = await setup(context)
    const [byToken, byHash, untouched] = [opaqueToken(), opaqueToken(), opaqueToken()]
    for (const token of [byToken, byHash, untouched]) s.idp.answerJson(token, activeAnswer(s.clock))
    for (const token of [byToken, byHash, untouched]) await expectAccepted(s, token)
    expect(s.idp.callCount).toBe(3)
    expect(s.gateway.app.gateway.invalidate({ token: byToken })).toBe(1)
    expect(s.gateway.app.gateway.invalidate({ tokenHash: sha256(byHash) })).toBe(1)
    s.idp.answerJson(byToken, { active: false })
    await expectInvalidToken(s, byToken, 'inactive')
    await expectAccepted(s, byHash)
    await expectAccepted(s, untouched)
    expect(s.idp.calls.map((call) => call.token)).toEqual([byToken, byHash, untouched, byToken, byHash])
  })

  it('evicts every token of a subject, and only those', async (context) => {
    const s = await setup(context)
    const [first, second, other] = [opaqueToken(), opaqueToken(), opaqueToken()]
    s.idp.answerJson(first, activeAnswer(s.clock, { sub: 'user-7', client_id: 'app-1' }))
    s.idp.answerJson(second, activeAnswer(s.clock, { sub: 'user-7', client_id: 'app-2' }))
    s.idp.answerJson(other, activeAnswer(s.clock, { sub: 'user-8', client_id: 'app-1' }))
    for (const token of [first, second, other]) await expectAccepted(s, token)
    expect(s.gateway.app.gateway.invalidate({ sub: 'user-7' })).toBe(2)
    for (const token of [first, second, other]) await expectAccepted(s, token)
    expect(s.idp.calls.map((call) => call.token)).toEqual([first, second, other, first, second])
  })

  it('evicts every token of a client_id, and only those', async (context) => {
    const s = await setup(context)
    const [first, second, other] = [opaqueToken(), opaqueToken(), opaqueToken()]
    s.idp.answerJson(first, activeAnswer(s.clock, { sub: 'user-1', client_id: 'app-1' }))
    s.idp.answerJson(second, activeAnswer(s.clock, { sub: 'user-2', client_id: 'app-1' }))
    s.idp.answerJson(other, activeAnswer(s.clock, { sub: 'user-1', client_id: 'app-2' }))
    for (const token of [first, second, other]) await expectAccepted(s, token)
    expect(s.gateway.app.gateway.invalidate({ client_id: 'app-1' })).toBe(2)
    s.idp.answerJson(first, { active: false })
    await expectInvalidToken(s, first, 'inactive')
    await expectAccepted(s, second)
    await expectAccepted(s, other)
    expect(s.idp.calls.map((call) => call.token)).toEqual([first, second, other, first, second])
  })

  it('issue 3 regression: neither caches nor shares an answer that was in flight when its token was invalidated', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    const release = deferred()
    s.idp.answer(token, { json: activeAnswer(s.clock), holdUntil: release.promise })
    const pending = s.call(token)
    await s.idp.waitForCalls(1)
    // Revoked while the endpoint was answering: that answer may predate the revocation.
    s.gateway.app.gateway.invalidate({ token })
    s.idp.answerJson(token, { active: false })
    // A request after the invalidation does not wait on the old call: it asks again.
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(2)
    release.resolve()
    expect((await pending).status).toBe(200)
    s.upstream.requests.length = 0
    // The late active answer did not overwrite the newer inactive one.
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(2)
  })

  it('issue 3 regression: does not cache an answer that was in flight when its subject was invalidated', async (context) => {
    const s = await setup(context)
    const token = opaqueToken()
    const release = deferred()
    s.idp.answer(token, { json: activeAnswer(s.clock, { sub: 'user-9' }), holdUntil: release.promise })
    const pending = s.call(token)
    await s.idp.waitForCalls(1)
    s.gateway.app.gateway.invalidate({ sub: 'user-9' })
    s.idp.answerJson(token, { active: false })
    release.resolve()
    expect((await pending).status).toBe(200)
    s.upstream.requests.length = 0
    await expectInvalidToken(s, token, 'inactive')
    expect(s.idp.callCount).toBe(2)
  })
})

describe('scopes from introspection', () => {
  const INSUFFICIENT_SCOPE_CHALLENGE =
    'Bearer realm="test", error="insufficient_scope", error_description="the access token lacks a required scope", scope="orders:read orders:write"'
  const routes = [
    { id: 'write', path: '/orders/**', methods: ['GET'], upstream: 'main', auth: 'required', scopes: { all: ['orders:read', 'orders:write'] } },
  ]

  it('answers 403 insufficient_scope when scope lacks one of scopes.all, and never reaches the upstream', async (context) => {
    const s = await setup(context, { routes })
    const token = opaqueToken()
    s.idp.answerJson(token, activeAnswer(s.clock, { scope: 'orders:read profile' }))
    const res = await s.call(token)
    expect(res.status).toBe(403)
    expect(res.headers.get('www-authenticate')).toBe(INSUFFICIENT_SCOPE_CHALLENGE)
    expect(await res.json()).toEqual({ error: 'insufficient_scope', error_description: 'the access token lacks a required scope' })
    expect(s.upstream.requests).toHaveLength(0)
  })

  it('accepts a token whose scope holds every scope of scopes.all, and a token without scope is refused', async (context) => {
    const s = await setup(context, { routes })
    const [scoped, unscoped] = [opaqueToken(), opaqueToken()]
    s.idp.answerJson(scoped, activeAnswer(s.clock, { scope: 'orders:write profile orders:read' }))
    s.idp.answerJson(unscoped, activeAnswer(s.clock, { scope: undefined }))
    expect((await expectAccepted(s, scoped))['x-auth-scopes']).toBe('orders:write profile orders:read')
    const res = await s.call(unscoped)
    expect(res.status).toBe(403)
    expect(res.headers.get('www-authenticate')).toBe(INSUFFICIENT_SCOPE_CHALLENGE)
    expect(await res.json()).toEqual({ error: 'insufficient_scope', error_description: 'the access token lacks a required scope' })
    expect(s.upstream.requests).toHaveLength(0)
  })
})
