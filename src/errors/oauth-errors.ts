
/**
 * One class per error the gateway can answer with. OAuth errors carry their RFC code; `description` is
 * public and generic, `internal.detail` is the precise reason and goes to the log only.
 */
export type ErrorCode =
  | 'invalid_request' | 'invalid_token' | 'insufficient_scope' | 'temporarily_unavailable' | 'server_error'
  | 'unauthorized' | 'not_found' | 'method_not_allowed' | 'request_too_large' | 'headers_too_large'
  | 'bad_gateway' | 'gateway_timeout' | 'request_timeout' | 'http_version_not_supported'
  // RFC 6749 §5.2 and RFC 8628 §3.5, answered by the embedded authorization server
  | 'invalid_client' | 'invalid_grant' | 'unauthorized_client' | 'unsupported_grant_type' | 'invalid_scope'
  | 'authorization_pending' | 'slow_down' | 'access_denied' | 'expired_token' | 'invalid_target'
  // RFC 6749 §4.1.2.1 and OIDC Core §3.1.2.6, answered by /authorize on the redirect
  | 'unsupported_response_type' | 'login_required' | 'consent_required' | 'request_not_supported' | 'request_uri_not_supported'
  // RFC 7591 §3.2.2, answered by the embedded server's client registration endpoint
  | 'invalid_redirect_uri' | 'invalid_client_metadata'
  // RFC 9449 §7.1 (gateway) and §5 (token endpoint): DPoP
  | 'invalid_dpop_proof' | 'use_dpop_nonce'
  // issue 21: a rate limit policy refused the request (429)
  | 'rate_limited'
  // issue 23: the decision endpoint was called by a source it does not trust
  | 'untrusted_caller'

export interface ErrorInternals {
  detail?: string
  cause?: unknown
}

export abstract class GatewayError extends Error {
  abstract readonly code: ErrorCode
  abstract readonly status: number
  /** Whether the response carries a `WWW-Authenticate: Bearer` challenge (RFC 6750 §3). */
  readonly challenge: boolean = false
  constructor(readonly description: string, readonly internal: ErrorInternals = {}) {
    super(description, { cause: internal.cause })
    this.name = new.target.name
  }
}

/**
 * RFC 6750 §3.1: the request carried no token at all, so the challenge has no `error`. On a route that
 * requires DPoP (issue 20) the challenge is `DPoP … algs="…"` (RFC 9449 §7.1).
 */
export class MissingToken extends GatewayError {
  readonly code = 'unauthorized'
  readonly status = 401
  override readonly challenge = true
  constructor(readonly dpopAlgs?: string) { super(dpopAlgs === undefined ? 'a Bearer access token is required' : 'a DPoP-bound access token is required') }
}
export class InvalidRequest extends GatewayError {
  readonly code = 'invalid_request'
  readonly status = 400
  override readonly challenge = true
}
/**
 * A request the gateway cannot read one way only (path tricks, non-origin-form targets, a body cut short):
 * `invalid_request` too, but not about the token, so no Bearer challenge.
 */
export class MalformedRequest extends GatewayError {
  readonly code = 'invalid_request'
  readonly status = 400
}
/**
 * Why a token was refused, as a bounded code: the `reason` label of portcullis_token_validations_total
 * (docs/metrics.md), where `detail` stays free text for the log.
 */
export type InvalidTokenReason =
  | 'malformed' | 'unknown_issuer' | 'expired' | 'not_yet_valid' | 'bad_signature' | 'unknown_kid'
  | 'disallowed_algorithm' | 'wrong_audience' | 'wrong_issuer' | 'wrong_type' | 'bad_claim' | 'inactive'
  | 'revoked' | 'bad_introspection_response' | 'other'

export class InvalidToken extends GatewayError {
  readonly code = 'invalid_token'
  readonly status = 401
  override readonly challenge = true
  constructor(detail: string, cause?: unknown, readonly reason: InvalidTokenReason = 'other') {
    super('the access token is invalid or expired', { detail, cause })
  }
}
/** Why a DPoP proof was refused (RFC 9449 §4.3): the metrics' `reason` and the log's, never the proof. */
export type DpopProofFailure =
  | 'dpop_multiple' | 'dpop_malformed' | 'dpop_typ' | 'dpop_alg' | 'dpop_jwk' | 'dpop_signature' | 'dpop_htm' | 'dpop_htu'
  | 'dpop_iat' | 'dpop_jti' | 'dpop_ath' | 'dpop_nonce' | 'dpop_replay' | 'dpop_key_mismatch' | 'dpop_missing'
/** Why a DPoP request (or a bound token sent as Bearer) was refused: the metrics' `reason`, never the proof. */
export type DpopRefusalReason = DpopProofFailure
  | 'dpop_bound_as_bearer' | 'dpop_required' | 'dpop_off' | 'dpop_unbound' | 'dpop_replay_unavailable'
  // issue 23: a decision for a proxy in front, with no `server.public_url` to check `htu` against
  | 'dpop_no_public_url'

/**
 * RFC 9449 §7.1: a DPoP request refused, with a `WWW-Authenticate: DPoP` challenge (`error`, `algs`), and
 * `DPoP-Nonce` when nonces are on. `invalid_dpop_proof` for the proof, `invalid_token` for the token's
 * binding, `use_dpop_nonce` for a missing or stale nonce; 503 when the replay store cannot answer.
 */
export class DpopRefused extends GatewayError {
  readonly code: ErrorCode
  readonly status: number
  override readonly challenge: boolean
  /** The challenge's `algs`, set by the gate that refused. */
  algs = ''
  /** A fresh nonce for `DPoP-Nonce` when nonces are on. */
  nonce: string | undefined
  constructor(readonly reason: DpopRefusalReason, detail: string, code: 'invalid_dpop_proof' | 'invalid_token' = 'invalid_dpop_proof',
    status = 401, cause?: unknown, useNonce = false) {
    super(status === 503 ? 'the DPoP proof could not be checked now' : useNonce ? 'a DPoP nonce from this server is required' : detail,
      { detail: `${reason}: ${detail}`, cause })
    this.status = status
    this.code = status === 503 ? 'temporarily_unavailable' : useNonce ? 'use_dpop_nonce' : code
    this.challenge = status === 401
  }
}

export class InsufficientScope extends GatewayError {
  readonly code = 'insufficient_scope'
  readonly status = 403
  override readonly challenge = true
  /** @param condition which rule failed, for the metrics: `scopes.all` or `scopes.any` */
  constructor(readonly required: readonly string[], detail: string, readonly condition = 'scopes') {
    super('the access token lacks a required scope', { detail })
  }
}
/**
 * A route's claim condition failed (issue 17): 403 without a Bearer challenge, since no scope the client
 * could ask for would help. Which condition failed (`claims.all[1]`) goes to the log and the metrics only.
 */
export class ClaimsNotSatisfied extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 403
  constructor(readonly condition: string, detail: string) {
    super('the access token does not permit this request', { detail })
  }
}
export class NoMatchingRoute extends GatewayError {
  readonly code = 'not_found'
  readonly status = 404
  constructor() { super('no route matches this path') }
}
export class MethodNotAllowed extends GatewayError {
  readonly code = 'method_not_allowed'
  readonly status = 405
  constructor(readonly allow: readonly string[]) { super('this path does not accept this method') }
}
export class RequestTooLarge extends GatewayError {
  readonly code = 'request_too_large'
  readonly status = 413
  constructor(limit: number) { super(`the request body exceeds ${limit} bytes`) }
}
export class HeadersTooLarge extends GatewayError {
  readonly code = 'headers_too_large'
  readonly status = 431
  constructor() { super('the request headers are too large') }
}
/** The client sent its body too slowly (a gap longer than `server.body_timeout`): its connection is closed. */
export class RequestTimeout extends GatewayError {
  readonly code = 'request_timeout'
  readonly status = 408
  constructor(detail: string) { super('the request body was not received in time', { detail }) }
}
/** RFC 9110 §15.6.6: only HTTP/1.x is served on this listener (an `HTTP/2.0` request line is not HTTP/2). */
export class HttpVersionNotSupported extends GatewayError {
  readonly code = 'http_version_not_supported'
  readonly status = 505
  constructor() { super('only HTTP/1.0 and HTTP/1.1 are served') }
}
export class BadGateway extends GatewayError {
  readonly code = 'bad_gateway'
  readonly status = 502
  constructor(detail: string, cause?: unknown) { super('the upstream could not be reached', { detail, cause }) }
}
export class GatewayTimeout extends GatewayError {
  readonly code = 'gateway_timeout'
  readonly status = 504
  constructor(detail: string, cause?: unknown) { super('the upstream did not answer in time', { detail, cause }) }
}
export class TemporarilyUnavailable extends GatewayError {
  readonly code = 'temporarily_unavailable'
  readonly status = 503
  constructor(detail: string, readonly retryAfterSeconds = 5, cause?: unknown) {
    super('the service is temporarily unavailable', { detail, cause })
  }
}
export class ServerError extends GatewayError {
  readonly code = 'server_error'
  readonly status = 500
  constructor(cause: unknown) { super('internal error', { detail: 'unexpected error', cause }) }
}

/** RFC 6749 §5.2: 401; with a Basic challenge when the client tried the Authorization header. */
export class InvalidClient extends GatewayError {
  readonly code = 'invalid_client'
  readonly status = 401
  constructor(readonly usedAuthorizationHeader: boolean, detail: string) {
    super('client authentication failed', { detail })
  }
}
export class InvalidGrant extends GatewayError {
  readonly code = 'invalid_grant'
  readonly status = 400
  constructor(detail: string, description = 'the grant is invalid, expired or revoked') { super(description, { detail }) }
}
export class UnauthorizedClient extends GatewayError {
  readonly code = 'unauthorized_client'
  readonly status = 400
  constructor(detail: string) { super('the client may not use this grant', { detail }) }
}
export class UnsupportedGrantType extends GatewayError {
  readonly code = 'unsupported_grant_type'
  readonly status = 400
  constructor(detail: string) { super('this grant type is not supported', { detail }) }
}
export class InvalidScope extends GatewayError {
  readonly code = 'invalid_scope'
  readonly status = 400
  constructor(detail: string) { super('the requested scope is invalid or exceeds what was granted', { detail }) }
}
/**
 * A rate limit policy refused the request (issue 21): 429 with `Retry-After`, and the RateLimit fields of the
 * route's policies unless the route opted out. Which policy goes to the log and the metrics.
 */
export class RateLimited extends GatewayError {
  readonly code = 'rate_limited'
  readonly status = 429
  constructor(readonly policy: string, readonly retryAfterSeconds: number, readonly fields: readonly string[] | null, detail: string) {
    super('too many requests; retry later', { detail })
  }
}

/** Brute-force protection (checklist CA-09): 429 with Retry-After; no registered code, so temporarily_unavailable. */
export class TooManyAttempts extends GatewayError {
  readonly code = 'temporarily_unavailable'
  readonly status = 429
  constructor(readonly retryAfterSeconds: number, detail: string, description = 'too many failed attempts; retry later') {
    super(description, { detail })
  }
}
/** RFC 8707 §2: a `resource` the server does not issue tokens for. */
export class InvalidTarget extends GatewayError {
  readonly code = 'invalid_target'
  readonly status = 400
  constructor(detail: string) { super('the requested resource is unknown', { detail }) }
}

// RFC 8628 §3.5: the token endpoint's answers to a device polling for its code (checklist DC-02..DC-04).
/** The user has not approved or denied yet: poll again after the interval. */
export class AuthorizationPending extends GatewayError {
  readonly code = 'authorization_pending'
  readonly status = 400
  constructor() { super('the user has not completed the authorization yet') }
}

/** Still pending, but polled sooner than the interval, which is now `interval` seconds for good (DC-03). */
export class SlowDown extends GatewayError {
  readonly code = 'slow_down'
  readonly status = 400
  constructor(readonly interval: number) { super(`polling too fast: wait at least ${interval} seconds between requests`) }
}

/** The user denied the request (DV-05); the device_code is of no further use. */
export class AccessDenied extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 400
  constructor(description = 'the user denied the authorization request') { super(description) }
}

/** The device_code is past its expires_in: the device must start over (DC-04). */
export class ExpiredToken extends GatewayError {
  readonly code = 'expired_token'
  readonly status = 400
  constructor() { super('the device_code has expired') }
}

// /authorize errors that only ever travel on the redirect back to the client (RFC 6749 §4.1.2.1, OIDC Core
// §3.1.2.6); their status is what they would be were they ever rendered, never sent as such.
export class UnsupportedResponseType extends GatewayError {
  readonly code = 'unsupported_response_type'
  readonly status = 400
}
export class LoginRequired extends GatewayError {
  readonly code = 'login_required'
  readonly status = 400
  constructor() { super('prompt=none, and the user is not logged in') }
}
export class ConsentRequired extends GatewayError {
  readonly code = 'consent_required'
  readonly status = 400
  constructor() { super('prompt=none, and the user has not consented to this client and scope') }
}
export class RequestNotSupported extends GatewayError {
  readonly code = 'request_not_supported'
  readonly status = 400
  constructor() { super('request objects are not supported') }
}
export class RequestUriNotSupported extends GatewayError {
  readonly code = 'request_uri_not_supported'
  readonly status = 400
  constructor() { super('request_uri is not supported') }
}

// RFC 7591 §3.2.2: a refused client registration; the description says which field and why (no secret in it).
export class InvalidRedirectUri extends GatewayError {
  readonly code = 'invalid_redirect_uri'
  readonly status = 400
}
export class InvalidClientMetadata extends GatewayError {
  readonly code = 'invalid_client_metadata'
  readonly status = 400
}
