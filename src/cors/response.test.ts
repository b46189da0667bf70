import { describe, expect, it } from 'vitest'
import { compileCorsPolicy, corsAnswer, NOT_ALLOWED } from './policy.js'
import { withCorsHeaders } from './response.js'

const policy = compileCorsPolicy({ allowed_origins: ['https://app.example.com', 'https://*.example.net'], allow_credentials: true }, undefined, null)!
const allowed = corsAnswer(policy, 'https://app.example.com', 'GET')!
const ADDED = ['access-control-allow-origin', 'https://app.example.com', 'access-control-allow-credentials', 'true',
  'access-control-expose-headers', 'WWW-Authenticate, RateLimit, RateLimit-Policy, Retry-After, DPoP-Nonce']

describe('withCorsHeaders', () => {
  it('adds Vary: Origin when the upstream sent no Vary', () => {
    expect(withCorsHeaders(['content-type', 'text/plain'], allowed)).toEqual(['content-type', 'text/plain', 'vary', 'Origin', ...ADDED])
  })

  it('appends Origin to the upstream\'s last Vary field, once', () => {
    expect(withCorsHeaders(['vary', 'Accept', 'vary', 'Accept-Encoding'], allowed))
      .toEqual(['vary', 'Accept', 'vary', 'Accept-Encoding, Origin', ...ADDED])
    for (const vary of ['origin', 'Accept, ORIGIN', ' Origin ', '*']) {
      expect(withCorsHeaders(['vary', vary], allowed)).toEqual(['vary', vary, ...ADDED])
    }
    expect(withCorsHeaders(['vary', 'Origin', 'vary', 'Accept'], allowed)).toEqual(['vary', 'Origin', 'vary', 'Accept', ...ADDED])
  })

  it('drops every Access-Control-* header of the upstream, also for an origin not allowed', () => {
    const upstream = ['access-control-allow-origin', '*', 'access-control-allow-credentials', 'true', 'access-control-max-age', '1', 'x-a', '1']
    expect(withCorsHeaders(upstream, allowed)).toEqual(['x-a', '1', 'vary', 'Origin', ...ADDED])
    expect(withCorsHeaders(upstream, NOT_ALLOWED)).toEqual(['x-a', '1', 'vary', 'Origin'])
  })
})

describe('corsAnswer', () => {
  it('answers a pattern origin with itself, and anything else with Vary: Origin only', () => {
    expect(corsAnswer(policy, 'https://a.b.example.net', 'GET')!.headers['access-control-allow-origin']).toBe('https://a.b.example.net')
    expect(corsAnswer(policy, 'https://example.net', 'GET')).toBe(NOT_ALLOWED)
    expect(corsAnswer(null, 'https://app.example.com', 'GET')).toBeNull()
  })

  it('gives no CORS header for a method outside allowed_methods (a simple GET is never preflighted)', () => {
    const postOnly = compileCorsPolicy({ allowed_origins: ['https://app.example.com'], allowed_methods: ['POST'] }, undefined, null)!
    expect(corsAnswer(postOnly, 'https://app.example.com', 'GET')).toBe(NOT_ALLOWED)
    expect(corsAnswer(postOnly, 'https://app.example.com', 'POST')).not.toBe(NOT_ALLOWED)
  })
})
