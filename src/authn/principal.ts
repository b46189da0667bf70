/** Who a validated token speaks for: what scopes are checked against and identity headers are set from. */
export interface Principal {
  readonly issuer: string
  readonly subject: string | undefined
  readonly clientId: string | undefined
  readonly scopes: readonly string[]
  /** Seconds since the epoch. */
  readonly expiresAt: number | undefined
  /** The token's `jti` (a string, or undefined): what revocation by jti matches. Nothing else of the claims is kept. */
  readonly jti: string | undefined
}

// RFC 6749 §3.3 scope-token: 1*NQCHAR. An array member with a space would read as two scopes in
// the space-separated X-Auth-Scopes header the upstream gets, so it makes the claim malformed.
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/

/**
 * `scope` (RFC 8693 §4.2, space-delimited) or `scp` (array, or a string as some issuers send it).
 * `undefined` when the claim is present but malformed: the caller rejects the token.
 */
export function readScopes(claims: Record<string, unknown>, claim: 'scope' | 'scp' | undefined): string[] | undefined {
  const names = claim ? [claim] : ['scope', 'scp']
  for (const name of names) {
    const value = claims[name]
    if (value === undefined) continue
    const scopes = typeof value === 'string' ? value.split(' ').filter((scope) => scope !== '') : value
    if (!Array.isArray(scopes) || !scopes.every((scope) => typeof scope === 'string' && SCOPE_TOKEN.test(scope))) return undefined
    return scopes as string[]
  }
  return []
}
