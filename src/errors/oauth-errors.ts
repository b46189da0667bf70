/**
 * One class per error the gateway can answer with, all importable from here: the base (base.ts), the
 * protected resource's RFC 6750 refusals (resource-server.ts), the gateway's own (gateway.ts), and the
 * embedded authorization server's (authorization-server.ts).
 */
export { GatewayError, type ErrorCode, type ErrorInternals } from './base.js'
export {
  ClaimsNotSatisfied, DpopRefused, InsufficientScope, InvalidRequest, InvalidToken, MissingToken,
  type DpopProofFailure, type DpopRefusalOptions, type DpopRefusalReason, type InvalidTokenReason,
} from './resource-server.js'
export {
  BadGateway, GatewayTimeout, HeadersTooLarge, HttpVersionNotSupported, MalformedRequest, MethodNotAllowed, NoMatchingRoute,
  RateLimited, RequestTimeout, RequestTooLarge, ServerError, TemporarilyUnavailable,
} from './gateway.js'
export {
  AccessDenied, AuthorizationPending, ConsentRequired, ExpiredToken, InvalidClient, InvalidClientMetadata, InvalidGrant,
  InvalidRedirectUri, InvalidScope, InvalidTarget, LoginRequired, RequestNotSupported, RequestUriNotSupported, SlowDown,
  TooManyAttempts, UnauthorizedClient, UnsupportedGrantType, UnsupportedResponseType,
} from './authorization-server.js'
