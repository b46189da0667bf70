/**
 * The embedded authorization server's errors: the token endpoint's (RFC 6749 §5.2, RFC 8707 §2, RFC 8628 §3.5),
 * those of /authorize that travel on the redirect (RFC 6749 §4.1.2.1, OIDC Core §3.1.2.6), and client
 * registration's (RFC 7591 §3.2.2).
 */
import { GatewayError } from './base.js'

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
 * Brute-force protection and the registration rate (`authorization_server.throttling`, `registration.rate`):
 * 429 with Retry-After; no registered code, so temporarily_unavailable.
 */
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

// RFC 8628 §3.5: the token endpoint's answers to a device polling for its code.
/** The user has not approved or denied yet: poll again after the interval. */
export class AuthorizationPending extends GatewayError {
  readonly code = 'authorization_pending'
  readonly status = 400
  constructor() { super('the user has not completed the authorization yet') }
}

/** Still pending, but polled sooner than the interval, which is now `interval` seconds for good (RFC 8628 §3.5: +5 s per slow_down). */
export class SlowDown extends GatewayError {
  readonly code = 'slow_down'
  readonly status = 400
  constructor(readonly interval: number) { super(`polling too fast: wait at least ${interval} seconds between requests`) }
}

/** The user denied the request (RFC 8628 §3.5); the device_code is of no further use. */
export class AccessDenied extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 400
  constructor(description = 'the user denied the authorization request') { super(description) }
}

/** The device_code is past its expires_in: the device must start over (RFC 8628 §3.5). */
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
