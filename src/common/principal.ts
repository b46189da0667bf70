/** Who a validated token speaks for: what scopes are checked against and identity headers are set from. */
export interface Principal {
  readonly issuer: string
  readonly subject: string | undefined
  readonly clientId: string | undefined
  readonly scopes: readonly string[]
  /** Seconds since the epoch. */
  readonly expiresAt: number | undefined
  /** The token's `jti` (a string, or undefined): what revocation by jti matches. */
  readonly jti: string | undefined
  /**
   * The embedded server's opaque tokens only (a store row, not a claim set): the `aud` it was issued for
   * (RFC 8707), read by resource routes (`resources[]`, RFC 9728) as other tokens' `aud` claim.
   */
  readonly audience?: readonly string[] | undefined
  /**
   * RFC 9449 §6: the SHA-256 thumbprint of the key the token is bound to (`cnf.jkt` of a JWT or of an
   * introspection answer, or the embedded server's store row); undefined for a Bearer token.
   */
  readonly jkt?: string | undefined
  /**
   * RFC 8705 §3.1: the SHA-256 thumbprint of the TLS client certificate the token is bound to (`cnf.x5t#S256`);
   * undefined for a token not bound to a certificate.
   */
  readonly x5t?: string | undefined
  /**
   * RFC 8707: the token was issued for resources only (`resources[].resource`), none of its issuer's own
   * audiences (the embedded server's `access_token.audience`): accepted on those resources' routes alone,
   * never on a route outside every resource. Unset for every other token.
   */
  readonly resourceOnly?: true | undefined
  /**
   * The claims that route conditions and claim headers name, by their top-level names: only
   * those are kept, so a cached principal holds no more of the token than the config reads. Undefined when
   * the config names none.
   */
  readonly claims?: Readonly<Record<string, unknown>> | undefined
}

/** RFC 7519 §4.1.3: `aud` (a string, or an array of strings) names one of `accepted`. */
export function audienceMatches(aud: unknown, accepted: readonly string[]): boolean {
  if (typeof aud === 'string') return accepted.includes(aud)
  return Array.isArray(aud) && aud.some((value) => typeof value === 'string' && accepted.includes(value))
}

/** The top-level claims named in `kept`, in an object with no prototype; undefined when none are kept. */
export function keepClaims(claims: Readonly<Record<string, unknown>>, kept: readonly string[]): Record<string, unknown> | undefined {
  if (kept.length === 0) return undefined
  const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>
  for (const name of kept) if (Object.hasOwn(claims, name)) out[name] = claims[name]
  return out
}

// RFC 6749 §3.3 scope-token: 1*NQCHAR. An array member with a space would read as two scopes in
// the space-separated X-Auth-Scopes header the upstream gets, so it makes the claim malformed.
export const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/

/** The scope claims `issuers[].scope_claim` names by keyword (any other entry is a claim path: claims/issuer.ts). */
export type ScopeClaim = 'scope' | 'scp' | 'scope_array'

/**
 * `scope` (RFC 9068 §2.2.3, RFC 8693 §4.2: a space-delimited string, never an array, unless read as
 * `scope_array`) or `scp` (array, or a string as some issuers send it); with no claim named, the first
 * present of the two. `undefined` when the claim is present but malformed: the caller rejects the token.
 */
export function readScopes(claims: Readonly<Record<string, unknown>>, claim: ScopeClaim | undefined): string[] | undefined {
  const names = claim === 'scp' ? ['scp'] : claim === undefined ? ['scope', 'scp'] : ['scope']
  for (const name of names) {
    const value = Object.hasOwn(claims, name) ? claims[name] : undefined
    if (value === undefined) continue
    if (Array.isArray(value) && name === 'scope' && claim !== 'scope_array') return undefined
    const scopes = typeof value === 'string' ? value.split(' ').filter((scope) => scope !== '') : value
    if (!Array.isArray(scopes) || !scopes.every((scope) => typeof scope === 'string' && SCOPE_TOKEN.test(scope))) return undefined
    return scopes as string[]
  }
  return []
}

/** What a token's `cnf` (RFC 7800) binds it to, of the confirmations the gateway checks. */
export interface Confirmation {
  /** RFC 9449 §6: a DPoP key's thumbprint. */
  readonly jkt?: string | undefined
  /** RFC 8705 §3.1: a TLS client certificate's thumbprint. */
  readonly x5t?: string | undefined
}

const NO_CONFIRMATION: Confirmation = {}
/** base64url of a SHA-256 digest: 43 characters. */
const SHA256_THUMBPRINT = /^[A-Za-z0-9_-]{43}$/

/**
 * The confirmation of a token (a JWT's claims or an introspection answer): `cnf.jkt` (RFC 9449 §6) and
 * `cnf.x5t#S256` (RFC 8705 §3.1); empty without `cnf`. Null when `cnf` is malformed or names any other member
 * (`jwk`, `kid`, `x5t`…): a binding the gateway does not check must not turn the token into a Bearer token.
 */
export function readConfirmation(claims: Readonly<Record<string, unknown>>): Confirmation | null {
  const cnf = Object.hasOwn(claims, 'cnf') ? claims.cnf : undefined
  if (cnf === undefined) return NO_CONFIRMATION
  if (typeof cnf !== 'object' || cnf === null || Array.isArray(cnf)) return null
  let jkt: string | undefined
  let x5t: string | undefined
  for (const [member, value] of Object.entries(cnf as Record<string, unknown>)) {
    if (typeof value !== 'string' || !SHA256_THUMBPRINT.test(value)) return null
    if (member === 'jkt') jkt = value
    else if (member === 'x5t#S256') x5t = value
    else return null
  }
  return jkt === undefined && x5t === undefined ? NO_CONFIRMATION : { jkt, x5t }
}
