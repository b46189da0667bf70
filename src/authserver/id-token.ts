/**
 * OpenID Connect ID tokens at the token endpoint (OIDC Core §3.1.3.3, §12.2): added to the response of a
 * grant that has a user (authorization_code, refresh_token, device_code, password) whenever the scope
 * granted in that response holds `openid`. client_credentials never calls this (RFC 6749 §4.4.3).
 *
 * The token is minimal: who (sub), for whom (aud, azp), by whom (iss), when (iat, exp, auth_time), the
 * request's nonce, and at_hash. The user's profile claims are served by /userinfo only — OIDC Core §5.4
 * puts scope-requested claims there when an access token is issued — so a copy of the ID token (in logs, in
 * browser storage) never carries more about the user than their subject.
 */
import { createHash } from 'node:crypto'
import { signCompactJws } from '../crypto/jws.js'
import type { RegisteredClient } from './registered-client.js'
import type { SigningAlgorithm } from '../common/token-formats.js'
import type { AuthServerContext } from './context.js'
import type { TokenGrant, TokenResponseBody } from './tokens.js'

const OPENID = 'openid'

export interface IdTokenRequest {
  readonly client: RegisteredClient
  /** The grant the response belongs to: its sub and authTime are the ID token's, on every refresh too (OIDC Core §12.2). */
  readonly grant: TokenGrant
  /** The scope granted in this response; a refresh narrowed to exclude `openid` gets no ID token. */
  readonly scope: readonly string[]
  /** The authorization request's nonce, exactly as sent (OIDC Core §3.1.3.7); never repeated on a refresh (§12.2). */
  readonly nonce?: string | undefined
}

/**
 * OIDC Core §3.1.3.6: base64url of the left half of the access token's hash, with the hash of the alg
 * header. RS256 and ES256 use SHA-256; EdDSA here is always Ed25519 (keys.ts), which signs with SHA-512.
 */
export function accessTokenHash(accessToken: string, alg: SigningAlgorithm): string {
  const digest = createHash(alg === 'EdDSA' ? 'sha512' : 'sha256').update(accessToken, 'ascii').digest()
  return digest.subarray(0, digest.length / 2).toString('base64url')
}

/**
 * The client's registered alg when the server holds keys for it: the access-token algorithm and RS256
 * (keys.ts). `portcullis check` is to refuse any other; should one get through, RS256 (the alg every OIDC
 * client accepts without registration) beats an error on every login.
 */
function signingAlgorithm(ctx: AuthServerContext, client: RegisteredClient): SigningAlgorithm {
  if (client.idTokenAlg === 'RS256' || client.idTokenAlg === ctx.settings.algorithm) return client.idTokenAlg
  ctx.log.warn({ clientId: client.clientId, alg: client.idTokenAlg }, 'no signing key for the client\'s id_token_signed_response_alg; signing its ID token with RS256')
  return 'RS256'
}

/** Signs the ID token that goes beside `accessToken`. */
export async function issueIdToken(ctx: AuthServerContext, request: IdTokenRequest, accessToken: string): Promise<string> {
  const { client, grant, nonce } = request
  const key = ctx.keys.current(signingAlgorithm(ctx, client))
  const iat = Math.floor(ctx.now() / 1000)
  // typ JWT, so no resource server mistakes it for an RFC 9068 access token (RFC 9068 §4, RFC 8725 §3.11).
  return signCompactJws({ alg: key.alg, kid: key.kid, typ: 'JWT' }, {
    // OIDC Core §2 makes azp optional beside a single aud; it names the client outright, whatever the verifier.
    azp: client.clientId,
    ...(grant.authTime !== undefined && { auth_time: grant.authTime }),
    ...(nonce !== undefined && { nonce }),
    at_hash: accessTokenHash(accessToken, key.alg),
    iss: ctx.settings.issuer,
    sub: grant.sub,
    aud: client.clientId,
    iat,
    // The access-token TTL: a rotated-out key stays published that long after its successor starts
    // signing (keyRetirementSeconds), so an ID token never outlives the key that verifies it.
    exp: iat + ctx.settings.accessTokenTtlSeconds,
  }, key.privateKey)
}

/** OIDC Core §3.1.3.3: `body` with an `id_token` when `openid` is in the granted scope, else `body` unchanged. */
export async function withIdToken(ctx: AuthServerContext, request: IdTokenRequest, body: TokenResponseBody): Promise<TokenResponseBody> {
  if (!request.scope.includes(OPENID)) return body
  return { ...body, id_token: await issueIdToken(ctx, request, body.access_token) }
}
