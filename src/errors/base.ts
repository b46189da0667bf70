/**
 * The base of every error the gateway can answer with. OAuth errors carry their RFC code; `description` is
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
  // a rate limit policy (`rate_limits`) refused the request (429; RFC 6585 §4)
  | 'rate_limited'
  // the decision endpoint (`decision:`) was called by a source `decision.trust` does not name
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
