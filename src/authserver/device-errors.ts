/**
 * The token endpoint's answers to a device polling for its code (RFC 8628 §3.5, checklist DC-02..DC-04):
 * all 400, rendered by sendOAuthError like every other RFC 6749 §5.2 error.
 */
import { GatewayError } from '../errors/oauth-errors.js'

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
  constructor() { super('the user denied the authorization request') }
}

/** The device_code is past its expires_in: the device must start over (DC-04). */
export class ExpiredToken extends GatewayError {
  readonly code = 'expired_token'
  readonly status = 400
  constructor() { super('the device_code has expired') }
}
