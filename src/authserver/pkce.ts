/**
 * PKCE, RFC 7636 with S256 only (RFC 9700 §2.1.1): the syntax of verifiers and challenges, and the
 * constant-time comparison of a verifier with the challenge a code was issued for (RFC 7636 §4.6).
 */
import { createHash, timingSafeEqual } from 'node:crypto'

/** RFC 7636 §4.1: code-verifier = 43*128unreserved, unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~". */
const VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/

/** A verifier outside this grammar is invalid_request at the token endpoint (as node-oidc-provider). */
export function verifierIsWellFormed(verifier: string): boolean {
  return VERIFIER.test(verifier)
}

/**
 * RFC 7636 §4.2: code-challenge = 43*128unreserved (anything else is invalid_request at
 * /authorize). An S256 challenge is always 43 base64url characters; a longer one passes this grammar but
 * can never match, so its code fails at the token endpoint with invalid_grant.
 */
export function challengeIsWellFormed(challenge: string): boolean {
  return VERIFIER.test(challenge)
}

/** RFC 7636 §4.2: BASE64URL-ENCODE(SHA256(ASCII(code_verifier))). Call it on well-formed verifiers only. */
export function s256(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url')
}

/**
 * RFC 7636 §4.6: true when `verifier` is well formed and its S256 transform equals `challenge`. The
 * comparison is constant-time; only the challenge's length can show, and an S256 challenge's
 * length (43) is no secret.
 */
export function verifyPkce(verifier: string, challenge: string): boolean {
  if (!verifierIsWellFormed(verifier)) return false
  const expected = Buffer.from(s256(verifier), 'ascii')
  const presented = Buffer.from(challenge, 'utf8')
  return expected.length === presented.length && timingSafeEqual(expected, presented)
}
