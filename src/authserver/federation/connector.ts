/**
 * One kind of upstream identity provider (Dex's connectors are the model): OpenID Connect (oidc.ts) and GitHub's
 * OAuth 2.0 with its user API (github.ts) today; SAML or LDAP would be further cases of the same interface.
 * A connector builds the upstream authorization request, turns the callback into the upstream's claims
 * (every check of its protocol done), and optionally says whether an account still exists.
 */

/** What the sign-in's start kept for its callback: single-use, bound to the browser (flow.ts). */
export interface UpstreamRequest {
  readonly state: string
  readonly nonce: string
  readonly codeVerifier: string
  /** Our callback URL for this provider (`<issuer>/callback/<id>`): one per provider (RFC 9700 §4.4.2.2). */
  readonly redirectUri: string
  /** prompt=login, or max_age=0, at our /authorize: the upstream must authenticate the user anew. */
  readonly forceLogin: boolean
  /** Our request's max_age (seconds), passed on so the upstream's session is no older. */
  readonly maxAge?: number
  /** Milliseconds since the epoch when the sign-in started: a forced login must postdate it. */
  readonly startedAt: number
}

/** What the upstream vouched for. */
export interface UpstreamIdentity {
  /** Its claims: the ID token's (and userinfo's, with `userinfo: true`), or GitHub's user. */
  readonly claims: Readonly<Record<string, unknown>>
  /** When the user last authenticated there (OIDC auth_time), seconds; absent when not said. */
  readonly authTime?: number
  /** The upstream ID token, for RP-initiated logout at the upstream (`logout.upstream`). */
  readonly idToken?: string
  /** What `refresh_check` asks the upstream with later: its refresh token (OIDC) or access token (GitHub). */
  readonly credential?: string
}

/** The upstream refused or failed; `unavailable` when it could not be reached or answered 5xx. */
export class UpstreamLoginError extends Error {
  constructor(message: string, readonly unavailable: boolean, readonly upstreamError?: string) {
    super(message)
  }
}

export interface Connector {
  /** Where to send the browser. Throws UpstreamLoginError when the provider's metadata cannot be had. */
  authorizationUrl(request: UpstreamRequest): Promise<URL>
  /** The callback's parameters, checked against `request`; throws UpstreamLoginError. */
  finish(callback: URL, request: UpstreamRequest): Promise<UpstreamIdentity>
  /**
   * `refresh_check`: whether the account behind `credential` still exists upstream; a rotated credential to
   * keep instead. Throws UpstreamLoginError with `unavailable` when the upstream cannot say.
   */
  checkAccount?(credential: string): Promise<{ readonly exists: boolean; readonly credential?: string }>
  /** The upstream's RP-initiated logout URL (OpenID Connect RP-Initiated Logout 1.0 §2), when it has one. */
  endSessionUrl?(idToken: string, postLogoutRedirectUri: string, state: string): Promise<URL | undefined>
}
