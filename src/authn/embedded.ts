/**
 * The embedded authorization server as the authenticator sees it: an issuer trusted in-process, and the
 * token prefixes that mark its secrets.
 */
import type { JWTVerifyGetKey } from 'jose'
import type { IssuerConfig } from '../config/schema.js'
import { DEVICE_CODE_PREFIX, OPAQUE_ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX } from '../common/token-formats.js'
import { keepClaims, type Principal } from '../common/principal.js'

/**
 * The embedded authorization server, trusted in-process: its keys need no HTTP round trip, its opaque
 * tokens are looked up in its store, and its revocations apply at once.
 */
export interface EmbeddedIssuer {
  /**
   * Its JWT policy, as for a configured issuer (issuer, algorithms, require_typ); `audience` is every audience
   * it issues for: its own and the gateway's `resources[].resource`.
   */
  readonly policy: IssuerConfig
  /**
   * `access_token.audience`: a token naming none of these (only resources) is `resourceOnly`, accepted on
   * its resources' routes alone (RFC 8707).
   */
  readonly ownAudience: readonly string[]
  readonly getKey: JWTVerifyGetKey
  /** Whether an opaque token is one of the embedded server's (by its prefix). */
  ownsOpaque(token: string): boolean
  /** The principal of a live opaque access token, or undefined. */
  lookupOpaque(hashOfToken: string): Promise<Principal | undefined>
  /** Its deny-list of revoked JWT access tokens. */
  isRevoked(principal: Principal): boolean
}

/**
 * The embedded server's token prefixes, reserved whether or not it runs in this process: such a token (a
 * refresh token presented as a Bearer, another instance's token) is a secret of ours, never sent to a
 * third-party introspection endpoint. Authorization codes carry no prefix.
 */
const EMBEDDED_TOKEN_PREFIXES = [OPAQUE_ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, DEVICE_CODE_PREFIX] as const

export function hasEmbeddedPrefix(token: string): boolean {
  for (let i = 0; i < EMBEDDED_TOKEN_PREFIXES.length; i++) if (token.startsWith(EMBEDDED_TOKEN_PREFIXES[i]!)) return true
  return false
}

/**
 * The embedded server's opaque tokens are rows, not claim sets: conditions and claim headers read the
 * claims its JWTs would carry (iss, sub, client_id, scope, exp, jti, aud, and those of `access_token.claims`).
 * @param kept the top-level claims principals keep (AuthenticatorOptions.keptClaims)
 */
export function withEmbeddedClaims(principal: Principal, kept: readonly string[] | undefined): Principal {
  // The record's user claims (`authorization_server.access_token.claims`), as a JWT of the same grant carries them.
  const { claims: userClaims, ...rest } = principal
  if (!kept?.length) return userClaims === undefined ? principal : rest
  const claims = keepClaims({
    ...userClaims,
    iss: principal.issuer, sub: principal.subject, client_id: principal.clientId, scope: principal.scopes.join(' '),
    exp: principal.expiresAt, jti: principal.jti, aud: principal.audience,
  }, kept)
  return { ...rest, claims }
}
