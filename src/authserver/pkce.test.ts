import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { challengeIsWellFormed, s256, verifierIsWellFormed, verifyPkce } from './pkce.js'

// The example of RFC 7636 Appendix B.
const RFC7636_OCTETS = [116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186, 22, 212, 37, 77, 105, 214, 191, 240,
  91, 88, 5, 88, 83, 132, 141, 121]
const RFC7636_VERIFIER = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk'
const RFC7636_DIGEST = [19, 211, 30, 150, 26, 26, 216, 236, 47, 22, 177, 12, 76, 152, 46, 8, 118, 168, 120, 173, 109, 241, 68, 86, 110, 225,
  137, 74, 203, 112, 249, 195]
const RFC7636_CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'
// The example of OAuth 2.1 draft-15 §4.1.1/§4.1.3.
const OAUTH21_VERIFIER = '3641a2d12d66101249cdf7a79c000c1f8c05d2aafcf14bf146497bed'
const OAUTH21_CHALLENGE = '6fdkQaPm51l13DSukcAH3Mdx7_ntecHYd1vi3n0hMZY'

describe('PKCE S256', () => {
  it('RFC 7636 App. B: the verifier octets, their SHA-256 and the challenge are those of the RFC', () => {
    expect(Buffer.from(RFC7636_OCTETS).toString('base64url')).toBe(RFC7636_VERIFIER)
    expect([...createHash('sha256').update(RFC7636_VERIFIER, 'ascii').digest()]).toEqual(RFC7636_DIGEST)
    expect(s256(RFC7636_VERIFIER)).toBe(RFC7636_CHALLENGE)
    expect(verifyPkce(RFC7636_VERIFIER, RFC7636_CHALLENGE)).toBe(true)
  })

  it('OAuth 2.1: the 56-character verifier gives the draft\'s challenge', () => {
    expect(OAUTH21_VERIFIER).toHaveLength(56)
    expect(s256(OAUTH21_VERIFIER)).toBe(OAUTH21_CHALLENGE)
    expect(verifyPkce(OAUTH21_VERIFIER, OAUTH21_CHALLENGE)).toBe(true)
  })

  it('a verifier is 43 to 128 unreserved characters: 42 and 129 are refused, and so are +, =, / and %', () => {
    expect(verifierIsWellFormed('a'.repeat(43))).toBe(true)
    expect(verifierIsWellFormed('a'.repeat(128))).toBe(true)
    expect(verifierIsWellFormed('Az09-._~'.repeat(6))).toBe(true)
    expect(verifierIsWellFormed('a'.repeat(42))).toBe(false)
    expect(verifierIsWellFormed('a'.repeat(129))).toBe(false)
    for (const bad of ['+', '=', '/', '%', ' ', 'é', '\n']) {
      expect(verifierIsWellFormed('a'.repeat(42) + bad), JSON.stringify(bad)).toBe(false)
    }
    expect(verifierIsWellFormed('')).toBe(false)
    // A malformed verifier never verifies, whatever the challenge.
    expect(verifyPkce('a'.repeat(42), s256('a'.repeat(42)))).toBe(false)
  })

  it('a challenge follows the same 43*128unreserved grammar', () => {
    expect(challengeIsWellFormed(RFC7636_CHALLENGE)).toBe(true)
    expect(challengeIsWellFormed(RFC7636_CHALLENGE.slice(1))).toBe(false)
    expect(challengeIsWellFormed(RFC7636_CHALLENGE + '=')).toBe(false)
    expect(challengeIsWellFormed('a'.repeat(129))).toBe(false)
  })

  it('a verifier that does not hash to the challenge is refused, whatever the length of the challenge', () => {
    expect(verifyPkce(OAUTH21_VERIFIER, RFC7636_CHALLENGE)).toBe(false)
    expect(verifyPkce(RFC7636_VERIFIER, RFC7636_CHALLENGE.toLowerCase())).toBe(false)
    expect(verifyPkce(RFC7636_VERIFIER, RFC7636_CHALLENGE.slice(0, -1))).toBe(false)
    expect(verifyPkce(RFC7636_VERIFIER, RFC7636_CHALLENGE + 'A')).toBe(false)
    expect(verifyPkce(RFC7636_VERIFIER, '')).toBe(false)
    // plain is not supported (RFC 9700 §2.1.1): the verifier itself is not its own challenge.
    expect(verifyPkce(RFC7636_VERIFIER, RFC7636_VERIFIER)).toBe(false)
  })
})
