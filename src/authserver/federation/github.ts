/**
 * The GitHub connector: OAuth 2.0 without OpenID Connect, so there is no ID token to check; the user is who
 * GitHub's REST API says owns the access token the code was exchanged for (RFC 6749 §4.1, PKCE S256, `state`).
 * `id` (numeric, never reused) is the subject; `login` may be renamed. The e-mail is the primary one GitHub has
 * verified (`/user/emails`), so `email_verified` is true only for it; groups are the user's organizations and
 * `org/team` for each team (`/user/orgs`, `/user/teams`, first 100 each). Mix-up defence is the provider's own
 * callback path (RFC 9700 §4.4.2.2): GitHub sends no RFC 9207 `iss`. GitHub cannot be asked to authenticate the
 * user again: prompt=login becomes `prompt=select_account` (docs/identity-providers.md).
 */
import type { Connector, UpstreamIdentity, UpstreamRequest } from './connector.js'
import { UpstreamLoginError } from './connector.js'
import { calculatePKCECodeChallenge } from 'openid-client'
import type { IdentityProviderSettings } from './settings.js'

/** More than any user, e-mail list or org list page GitHub sends. */
const MAX_RESPONSE_BYTES = 1024 * 1024

/** A response body as JSON, refused past MAX_RESPONSE_BYTES. */
async function readJson(response: Response): Promise<unknown> {
  const length = Number(response.headers.get('content-length') ?? 0)
  if (length > MAX_RESPONSE_BYTES) throw new UpstreamLoginError('GitHub answered with an oversized body', false)
  const reader = response.body?.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const chunk = await reader?.read()
    if (!chunk || chunk.done) break
    size += chunk.value.byteLength
    if (size > MAX_RESPONSE_BYTES) {
      await reader!.cancel()
      throw new UpstreamLoginError('GitHub answered with an oversized body', false)
    }
    chunks.push(chunk.value)
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown
  } catch {
    throw new UpstreamLoginError('GitHub answered with something other than JSON', response.status >= 500)
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

export class GitHubConnector implements Connector {
  constructor(private readonly provider: IdentityProviderSettings) {}

  private async call(url: string, init: RequestInit = {}): Promise<{ status: number; body: unknown }> {
    let response: Response
    try {
      response = await fetch(url, { ...init, redirect: 'error', signal: AbortSignal.timeout(this.provider.timeoutMs) })
    } catch (error) {
      throw new UpstreamLoginError(`GitHub could not be reached: ${(error as Error).message.slice(0, 100)}`, true)
    }
    if (response.status >= 500) {
      await response.body?.cancel()
      throw new UpstreamLoginError(`GitHub answered ${response.status}`, true)
    }
    return { status: response.status, body: await readJson(response) }
  }

  private api(path: string, accessToken: string): Promise<{ status: number; body: unknown }> {
    return this.call(`${this.provider.github.apiUrl}${path}`, {
      headers: {
        accept: 'application/vnd.github+json', authorization: `Bearer ${accessToken}`,
        'x-github-api-version': '2022-11-28', 'user-agent': 'portcullis',
      },
    })
  }

  authorizationUrl(request: UpstreamRequest): Promise<URL> {
    return calculatePKCECodeChallenge(request.codeVerifier).then((challenge) => {
      const url = new URL(`${this.provider.github.webUrl}/login/oauth/authorize`)
      url.search = new URLSearchParams({
        client_id: this.provider.clientId,
        redirect_uri: request.redirectUri,
        scope: this.provider.scopes.join(' '),
        state: request.state,
        code_challenge: challenge,
        code_challenge_method: 'S256',
        ...(request.forceLogin && { prompt: 'select_account' }),
      }).toString()
      return url
    })
  }

  async finish(callback: URL, request: UpstreamRequest): Promise<UpstreamIdentity> {
    const params = callback.searchParams
    if (params.get('state') !== request.state) throw new UpstreamLoginError('the state does not match', false)
    const code = params.get('code')
    if (code === null || code === '') throw new UpstreamLoginError('the callback carries no code', false)
    const auth = this.provider.clientAuth
    const form = new URLSearchParams({
      client_id: this.provider.clientId, code, redirect_uri: request.redirectUri, code_verifier: request.codeVerifier,
      ...(auth.method === 'client_secret_basic' && { client_secret: auth.secret }),
    })
    const exchanged = await this.call(`${this.provider.github.webUrl}/login/oauth/access_token`, {
      method: 'POST', body: form, headers: { accept: 'application/json', 'content-type': 'application/x-www-form-urlencoded' },
    })
    // GitHub answers a refused exchange with 200 and an `error` member.
    if (!isObject(exchanged.body) || typeof exchanged.body.access_token !== 'string') {
      const error = isObject(exchanged.body) && typeof exchanged.body.error === 'string' ? exchanged.body.error : 'no access_token'
      throw new UpstreamLoginError(`the code exchange failed: ${error.slice(0, 64)}`, false, error)
    }
    const accessToken = exchanged.body.access_token
    const claims = await this.user(accessToken)
    return { claims, credential: accessToken }
  }

  /** The user behind the token, as claims: GitHub's user object, its verified primary e-mail, its orgs and teams. */
  private async user(accessToken: string): Promise<Record<string, unknown>> {
    const [user, emails, orgs, teams] = await Promise.all(['/user', '/user/emails', '/user/orgs?per_page=100', '/user/teams?per_page=100']
      .map((path) => this.api(path, accessToken)))
    if (user!.status !== 200 || !isObject(user!.body)) throw new UpstreamLoginError(`GitHub's /user answered ${user!.status}`, false)
    const primary = Array.isArray(emails!.body)
      ? emails!.body.find((entry): entry is Record<string, unknown> => isObject(entry) && entry.primary === true && entry.verified === true)
      : undefined
    const groups = [
      ...(Array.isArray(orgs!.body) ? orgs!.body : []).flatMap((org) => (isObject(org) && typeof org.login === 'string' ? [org.login] : [])),
      ...(Array.isArray(teams!.body) ? teams!.body : []).flatMap((team) => (isObject(team) && typeof team.slug === 'string'
        && isObject(team.organization) && typeof team.organization.login === 'string' ? [`${team.organization.login}/${team.slug}`] : [])),
    ]
    const { email: _unverified, ...profile } = user!.body
    return { ...profile, ...(typeof primary?.email === 'string' && { email: primary.email, email_verified: true }), groups }
  }

  /** `refresh_check`: GitHub's OAuth tokens do not expire; a revoked token or a deleted account answers 401. */
  async checkAccount(credential: string): Promise<{ exists: boolean }> {
    const { status } = await this.api('/user', credential)
    if (status === 401 || status === 404) return { exists: false }
    if (status !== 200) throw new UpstreamLoginError(`GitHub's /user answered ${status}`, true)
    return { exists: true }
  }
}
