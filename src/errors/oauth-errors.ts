/**
 * One class per error the gateway can answer with. OAuth errors carry their RFC code; `description` is
 * public and generic, `internal.detail` is the precise reason and goes to the log only.
 */
export type ErrorCode =
  | 'invalid_request' | 'invalid_token' | 'insufficient_scope' | 'temporarily_unavailable' | 'server_error'
  | 'unauthorized' | 'not_found' | 'method_not_allowed' | 'request_too_large' | 'headers_too_large'
  | 'bad_gateway' | 'gateway_timeout'

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

/** RFC 6750 §3.1: the request carried no token at all, so the challenge has no `error`. */
export class MissingToken extends GatewayError {
  readonly code = 'unauthorized'
  readonly status = 401
  override readonly challenge = true
  constructor() { super('a Bearer access token is required') }
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
export class InvalidToken extends GatewayError {
  readonly code = 'invalid_token'
  readonly status = 401
  override readonly challenge = true
  constructor(detail: string, cause?: unknown) {
    super('the access token is invalid or expired', { detail, cause })
  }
}
export class InsufficientScope extends GatewayError {
  readonly code = 'insufficient_scope'
  readonly status = 403
  override readonly challenge = true
  constructor(readonly required: readonly string[], detail: string) {
    super('the access token lacks a required scope', { detail })
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
