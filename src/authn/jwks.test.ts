import { describe, expect, it, type TestContext } from 'vitest'
import type { webcrypto } from 'node:crypto'
import { errors, type CompactJWSHeaderParameters } from 'jose'
import type { FastifyBaseLogger } from 'fastify'
import { startTestIssuer, type TestIssuer } from '../../test/support/issuer.js'
import { KeySetUnavailable, RemoteKeySet, type KeySetOptions } from './jwks.js'

/** A logger that keeps what it was given (pino's own API, not ours). */
function recordingLog(): FastifyBaseLogger & { lines: string[] } {
  const lines: string[] = []
  const write = (...args: unknown[]) => { lines.push(args.map((arg) => (typeof arg === 'string' ? arg : JSON.stringify(arg))).join(' ')) }
  const log = { lines, info: write, warn: write, error: write, debug: write, trace: write, fatal: write, level: 'info', silent: () => undefined, child: () => log }
  return log as unknown as FastifyBaseLogger & { lines: string[] }
}

async function setup(context: TestContext, options: Partial<KeySetOptions> = {}) {
  const issuer = await startTestIssuer()
  context.onTestFinished(() => issuer.close())
  let now = 1_000_000
  const log = recordingLog()
  const keySet = new RemoteKeySet({
    issuer: issuer.issuer, jwksUri: issuer.jwksUri, discovery: false, cooldownMs: 30_000, maxAgeMs: 600_000, fetchTimeoutMs: 2000,
    now: () => now, log, ...options,
  })
  return { issuer, keySet, log, advance: (ms: number) => { now += ms } }
}

const headerOf = (issuer: TestIssuer, kid?: string): CompactJWSHeaderParameters =>
  ({ alg: 'ES256', kid: kid ?? issuer.keys.find((key) => key.alg === 'ES256')!.kid })

/** getKey as jose calls it during verification (the token itself is not looked at). */
const lookup = (keySet: RemoteKeySet, header: CompactJWSHeaderParameters) =>
  Promise.resolve(keySet.getKey(header, { payload: '', signature: '' }))

describe('RemoteKeySet', () => {
  it('finds each of 50 keys by its kid, the same key jose finds in the whole set', async (context) => {
    const { issuer, keySet } = await setup(context)
    for (let i = 0; i < 49; i++) await issuer.rotate('ES256')
    const es256 = issuer.keys.filter((key) => key.alg === 'ES256')
    expect(es256.length).toBeGreaterThanOrEqual(50)
    const { createLocalJWKSet } = await import('jose')
    const whole = createLocalJWKSet({ keys: issuer.keys.map((key) => ({ ...key.publicJwk, kid: key.kid, alg: key.alg })) })
    for (const key of es256) {
      const found = await lookup(keySet, headerOf(issuer, key.kid))
      const expected = await whole({ alg: 'ES256', kid: key.kid }, { payload: '', signature: '' })
      expect(JSON.stringify(await crypto.subtle.exportKey('jwk', found as webcrypto.CryptoKey))).toBe(JSON.stringify(await crypto.subtle.exportKey('jwk', expected as webcrypto.CryptoKey)))
    }
    expect(issuer.jwksFetches).toBe(1)
    // An ES256 header without kid matches every ES256 key: jose's own answer, as without the index.
    await expect(lookup(keySet, { alg: 'ES256' })).rejects.toBeInstanceOf(errors.JWKSMultipleMatchingKeys)
    // A kid that names an object's own members, or nothing, finds no key (the index is a Map, never an object's prototype).
    for (const kid of ['__proto__', 'constructor', 'toString', '']) {
      await expect(lookup(keySet, { alg: 'ES256', kid })).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    }
  })

  it('sends concurrent first lookups down one fetch', async (context) => {
    const { issuer, keySet } = await setup(context)
    const keys = await Promise.all(Array.from({ length: 20 }, () => lookup(keySet, headerOf(issuer))))
    expect(keys.every((key) => key === keys[0])).toBe(true)
    expect(issuer.jwksFetches).toBe(1)
    expect(keySet.fetches).toBe(1)
  })

  it('refetches for concurrent unknown kids once per cooldown, one fetch in flight', async (context) => {
    const { issuer, keySet, advance } = await setup(context)
    await lookup(keySet, headerOf(issuer))
    advance(30_001)
    const lookups = Array.from({ length: 20 }, (_, i) => lookup(keySet, headerOf(issuer, `unknown-${i}`)))
    const results = await Promise.allSettled(lookups)
    expect(results.every((result) => result.status === 'rejected' && result.reason instanceof errors.JWKSNoMatchingKey)).toBe(true)
    expect(issuer.jwksFetches).toBe(2)
    await expect(lookup(keySet, headerOf(issuer, 'unknown-again'))).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    expect(issuer.jwksFetches).toBe(2)
  })

  it('throws KeySetUnavailable with the seconds left in the cooldown when no set was ever fetched', async (context) => {
    const { issuer, keySet, advance, log } = await setup(context)
    issuer.setDown(true)
    const error = await lookup(keySet, headerOf(issuer)).catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(KeySetUnavailable)
    expect((error as KeySetUnavailable).retryAfterSeconds).toBe(30)
    advance(29_500)
    const later = await lookup(keySet, headerOf(issuer)).catch((caught: unknown) => caught)
    expect((later as KeySetUnavailable).retryAfterSeconds).toBe(1)
    expect(issuer.jwksFetches).toBe(1)
    expect(log.lines.some((line) => line.includes('key set fetch failed'))).toBe(true)
  })

  it('keeps its keys when a refresh fails', async (context) => {
    const { issuer, keySet, advance, log } = await setup(context)
    const key = await lookup(keySet, headerOf(issuer))
    issuer.setDown(true)
    advance(30_001)
    await expect(lookup(keySet, headerOf(issuer, 'unknown'))).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    expect(issuer.jwksFetches).toBe(2)
    expect(await lookup(keySet, headerOf(issuer))).toBe(key)
    expect(log.lines.some((line) => line.includes('keeping the keys already fetched'))).toBe(true)
  })

  it('refuses symmetric algorithms whatever the JWKS holds', async (context) => {
    const { issuer, keySet } = await setup(context)
    await expect(keySet.getKey({ alg: 'HS256', kid: 'x' }, { payload: '', signature: '' })).rejects.toBeInstanceOf(errors.JOSENotSupported)
    expect(issuer.jwksFetches).toBe(1)
  })
})
