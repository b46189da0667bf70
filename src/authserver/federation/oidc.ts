/**
 * The OpenID Connect connector, on openid-client (panva's certified relying party): discovery (OIDC Discovery §4,
 * the issuer compared exactly; Entra's multi-tenant `{tenantid}` issuer as Microsoft documents it), the code flow
 * with PKCE S256, `state` and `nonce`, RFC 9207's `iss` on the callback, and the ID token checked whole — its
 * signature against the provider's JWKS, `iss`, `aud`, `azp`, `exp`, `iat`, `nonce`, and `auth_time` against a
 * max_age sent (OIDC Core §3.1.3.7). Discovery is lazy and retried: a provider that is down at start delays no
 * one else's sign-in and is tried again at the next.
 */
import * as client from 'openid-client'
import type { Connector, UpstreamIdentity, UpstreamRequest } from './connector.js'
import { UpstreamLoginError } from './connector.js'
import type { IdentityProviderSettings } from './settings.js'

/** A forced login's auth_time may be this much older than the start of the sign-in (two clocks). */
const CLOCK_SKEW_SECONDS = 60
/** A discovery that failed is tried again after this long, not on every request of a crowd. */
const RETRY_DISCOVERY_MS = 5_000

function clientAuthentication(provider: IdentityProviderSettings): client.ClientAuth {
  const auth = provider.clientAuth
  if (auth.method === 'private_key_jwt') return client.PrivateKeyJwt({ key: auth.key, ...(auth.kid !== undefined && { kid: auth.kid }) })
  if (auth.method === 'client_secret_basic') return client.ClientSecretBasic(auth.secret)
  return client.None()
}

/** Why an upstream exchange failed, as an UpstreamLoginError: unavailable (network, 5xx) or refused. */
export function upstreamFailure(error: unknown, what: string): UpstreamLoginError {
  if (error instanceof UpstreamLoginError) return error
  if (error instanceof client.ResponseBodyError) {
    return new UpstreamLoginError(`${what}: the provider answered ${error.error}`, error.status >= 500, error.error)
  }
  if (error instanceof client.AuthorizationResponseError) return new UpstreamLoginError(`${what}: ${error.error}`, false, error.error)
  const message = error instanceof Error ? error.message : String(error)
  const code = (error as { code?: unknown }).code
  // Not reachable: fetch's own failure (refused, reset, DNS, TLS) or our timeout, anywhere in the cause chain;
  // or an answer that is not the protocol's at all (a 503 page at discovery).
  let unavailable = code === 'OAUTH_RESPONSE_IS_NOT_CONFORM'
  for (let at: unknown = error, depth = 0; at !== undefined && at !== null && depth < 5; at = (at as { cause?: unknown }).cause, depth++) {
    if ((at instanceof TypeError && at.message === 'fetch failed') || (at instanceof DOMException && /Timeout|Abort/.test(at.name))) unavailable = true
  }
  return new UpstreamLoginError(`${what}: ${message.slice(0, 200)}`, unavailable)
}

export class OidcConnector implements Connector {
  private configuration: Promise<client.Configuration> | undefined
  private failedAt = 0

  constructor(private readonly provider: IdentityProviderSettings, private readonly now: () => number = Date.now) {}

  /** Every request to the provider is bounded in time (`timeout`). */
  private readonly fetch: client.CustomFetch = (url, options) =>
    fetch(url, { ...options, signal: AbortSignal.timeout(this.provider.timeoutMs) } as RequestInit)

  private config(): Promise<client.Configuration> {
    if (this.configuration && (this.failedAt === 0 || this.now() - this.failedAt < RETRY_DISCOVERY_MS)) return this.configuration
    const { provider } = this
    this.failedAt = 0
    const discovered = client.discovery(new URL(provider.issuer!), provider.clientId, undefined, clientAuthentication(provider), {
      [client.customFetch]: this.fetch,
      timeout: Math.ceil(provider.timeoutMs / 1000),
      ...(provider.allowHttp && { execute: [client.allowInsecureRequests] }),
    }).then((config) => {
      // The ID token's signature is checked too, not only the TLS channel it came over (validateApplicationLevelSignature).
      client.enableNonRepudiationChecks(config)
      return config
    })
    discovered.catch(() => { this.failedAt = this.now() })
    this.configuration = discovered
    return discovered.catch((error: unknown) => { throw upstreamFailure(error, 'discovery failed') })
  }

  async authorizationUrl(request: UpstreamRequest): Promise<URL> {
    const config = await this.config()
    const parameters: Record<string, string> = {
      redirect_uri: request.redirectUri,
      scope: this.provider.scopes.join(' '),
      state: request.state,
      nonce: request.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(request.codeVerifier),
      code_challenge_method: 'S256',
      ...(request.maxAge !== undefined && { max_age: String(request.maxAge) }),
    }
    // OIDC Core §11: offline_access (a refresh token for refresh_check) is granted only with prompt=consent.
    const offline = this.provider.scopes.includes('offline_access')
    const prompt = [...(request.forceLogin ? ['login'] : []), ...(offline ? ['consent'] : [])]
    if (prompt.length > 0) parameters.prompt = prompt.join(' ')
    // Google hands out refresh tokens for access_type=offline instead.
    if (offline && this.provider.preset === 'google') parameters.access_type = 'offline'
    return client.buildAuthorizationUrl(config, parameters)
  }

  async finish(callback: URL, request: UpstreamRequest): Promise<UpstreamIdentity> {
    const config = await this.config()
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>
    try {
      tokens = await client.authorizationCodeGrant(config, callback, {
        pkceCodeVerifier: request.codeVerifier,
        expectedState: request.state,
        expectedNonce: request.nonce,
        idTokenExpected: true,
        ...(request.maxAge !== undefined && { maxAge: request.maxAge }),
      })
    } catch (error) {
      throw upstreamFailure(error, 'the sign-in could not be completed')
    }
    const claims = tokens.claims()
    if (!claims) throw new UpstreamLoginError('no ID token', false)
    const authTime = typeof claims.auth_time === 'number' ? claims.auth_time : undefined
    // prompt=login: the upstream must have authenticated the user after this sign-in began.
    if (request.forceLogin && authTime !== undefined && authTime < request.startedAt / 1000 - CLOCK_SKEW_SECONDS) {
      throw new UpstreamLoginError('the provider did not authenticate the user again (prompt=login, auth_time)', false)
    }
    let merged: Record<string, unknown> = { ...claims }
    if (this.provider.userinfo) {
      try {
        // OIDC Core §5.3.4: the userinfo's sub must be the ID token's.
        const info = await client.fetchUserInfo(config, tokens.access_token, claims.sub)
        merged = { ...info, ...claims }
      } catch (error) {
        throw upstreamFailure(error, 'userinfo failed')
      }
    }
    return {
      claims: merged,
      ...(authTime !== undefined && { authTime }),
      ...(tokens.id_token !== undefined && { idToken: tokens.id_token }),
      ...(tokens.refresh_token !== undefined && { credential: tokens.refresh_token }),
    }
  }

  /** `refresh_check`: a refresh the provider refuses with invalid_grant means the account (or its consent) is gone. */
  async checkAccount(credential: string): Promise<{ exists: boolean; credential?: string }> {
    const config = await this.config()
    try {
      const tokens = await client.refreshTokenGrant(config, credential)
      return { exists: true, ...(tokens.refresh_token !== undefined && { credential: tokens.refresh_token }) }
    } catch (error) {
      const failure = upstreamFailure(error, 'the account check failed')
      if (failure.upstreamError === 'invalid_grant') return { exists: false }
      throw failure
    }
  }

  async endSessionUrl(idToken: string, postLogoutRedirectUri: string, state: string): Promise<URL | undefined> {
    const config = await this.config()
    if (config.serverMetadata().end_session_endpoint === undefined) return undefined
    return client.buildEndSessionUrl(config, { id_token_hint: idToken, post_logout_redirect_uri: postLogoutRedirectUri, state })
  }
}
