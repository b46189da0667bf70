/**
 * The gateway's own refusals and failures, not about the token: requests it cannot route or read, limits,
 * the upstream failing (RFC 9110 §15), rate limits, and its own errors.
 */
import { GatewayError } from './base.js'

/**
 * A request the gateway cannot read one way only (path tricks, non-origin-form targets, a body cut short):
 * `invalid_request` too, but not about the token, so no Bearer challenge.
 */
export class MalformedRequest extends GatewayError {
  readonly code = 'invalid_request'
  readonly status = 400
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
/**
 * A rate limit policy refused the request (`rate_limits`): 429 with `Retry-After`, and the RateLimit fields of the
 * route's policies unless the route opted out. Which policy goes to the log and the metrics.
 */
export class RateLimited extends GatewayError {
  readonly code = 'rate_limited'
  readonly status = 429
  constructor(readonly policy: string, readonly retryAfterSeconds: number, readonly fields: readonly string[] | null, detail: string) {
    super('too many requests; retry later', { detail })
  }
}
