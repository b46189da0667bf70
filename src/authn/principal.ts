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

/** Which claim an issuer's scopes are read from (`issuers[].scope_claim`). */
export type ScopeClaim = 'scope' | 'scp' | 'scope_array'

/**
 * `scope` (RFC 9068 §2.2.3, RFC 8693 §4.2: a space-delimited string, never an array, unless the issuer is
 * configured with `scope_array`) or `scp` (array, or a string as some issuers send it). `undefined` when
 * the claim is present but malformed: the caller rejects the token.
 */
export function readScopes(claims: Record<string, unknown>, claim: ScopeClaim | undefined): string[] | undefined {
  const names = claim === 'scp' ? ['scp'] : claim === undefined ? ['scope', 'scp'] : ['scope']
  for (const name of names) {
    const value = claims[name]
    if (value === undefined) continue
    if (Array.isArray(value) && name === 'scope' && claim !== 'scope_array') return undefined
    const scopes = typeof value === 'string' ? value.split(' ').filter((scope) => scope !== '') : value
    if (!Array.isArray(scopes) || !scopes.every((scope) => typeof scope === 'string' && SCOPE_TOKEN.test(scope))) return undefined
    return scopes as string[]
  }
  return []
}
