/** Random identifiers: codes, tokens, session and interaction ids. */
import { randomBytes } from 'node:crypto'

/**
 * 256 bits from the CSPRNG, base64url: RFC 6749 §10.10 asks that the chance of guessing one be at most
 * 2^-128 (and should be 2^-160).
 */
export function randomToken(prefix = ''): string {
  return prefix + randomBytes(32).toString('base64url')
}
