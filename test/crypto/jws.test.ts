/**
 * The embedded server's JWS signer (src/crypto/jws.ts), checked against jose's verifier for every algorithm
 * the server signs with: the header is exactly what was asked, the payload round-trips, and a signature
 * from another key, or over another payload, does not verify.
 */
import { generateKeyPairSync } from 'node:crypto'
import { compactVerify, decodeProtectedHeader, jwtVerify } from 'jose'
import { describe, expect, it } from 'vitest'
import type { SigningAlgorithm } from '../../src/authserver/context.js'
import { signCompactJws } from '../../src/crypto/jws.js'

const pairs = {
  ES256: () => generateKeyPairSync('ec', { namedCurve: 'P-256' }),
  RS256: () => generateKeyPairSync('rsa', { modulusLength: 2048 }),
  EdDSA: () => generateKeyPairSync('ed25519'),
} satisfies Record<SigningAlgorithm, unknown>

describe('signCompactJws', () => {
  for (const alg of Object.keys(pairs) as SigningAlgorithm[]) {
    it(`${alg}: jose verifies it, with the header and payload as given; another key or a changed payload does not verify`, async () => {
      const { publicKey, privateKey } = pairs[alg]()
      const payload = { iss: 'https://as.example', sub: 'ülrike', aud: ['a', 'b'], iat: 1_700_000_000, exp: 4_000_000_000, jti: 'j-1', scope: 'x y' }
      const token = signCompactJws({ alg, kid: 'k-1', typ: 'at+jwt' }, payload, privateKey)
      expect(decodeProtectedHeader(token)).toStrictEqual({ alg, kid: 'k-1', typ: 'at+jwt' })
      const verified = await jwtVerify(token, publicKey, { algorithms: [alg], typ: 'at+jwt' })
      expect(verified.payload).toStrictEqual(payload)

      const other = pairs[alg]().publicKey
      await expect(compactVerify(token, other, { algorithms: [alg] })).rejects.toThrow()
      const [header, , signature] = token.split('.')
      const forged = `${header}.${Buffer.from(JSON.stringify({ ...payload, sub: 'mallory' })).toString('base64url')}.${signature}`
      await expect(compactVerify(forged, publicKey, { algorithms: [alg] })).rejects.toThrow()
    })
  }

  it('ES256 signatures are the 64-byte R || S of RFC 7518 §3.4, not DER', () => {
    const { privateKey } = pairs.ES256()
    const token = signCompactJws({ alg: 'ES256', kid: 'k', typ: 'JWT' }, {}, privateKey)
    expect(Buffer.from(token.split('.')[2]!, 'base64url')).toHaveLength(64)
  })
})
