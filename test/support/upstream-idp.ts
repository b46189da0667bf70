/**
 * An upstream OpenID Connect provider nobody here wrote: node-oidc-provider, on 127.0.0.1:0, with its own login
 * and consent pages (devInteractions: any login name signs in as that account; the password is not checked).
 * Accounts are claims by login name. `down` makes it answer 503 to everything, as a provider in an outage would.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Provider, { type ClientMetadata } from 'oidc-provider'

export interface UpstreamIdp {
  readonly issuer: string
  readonly provider: Provider
  /** Answer 503 to every request while true. */
  down: boolean
  /** Every request path seen, in order (to prove what was or was not asked). */
  readonly requests: string[]
  /** Deletes an account: its refresh tokens stop working (oidc-provider: invalid_grant, account not found). */
  deleteAccount(login: string): void
  close(): Promise<void>
}

export interface UpstreamIdpOptions {
  readonly clients: readonly ClientMetadata[]
  /** Login name → claims (beside `sub`, which is the login name). */
  readonly accounts?: Readonly<Record<string, Record<string, unknown>>>
  /** A path under the origin for the issuer (`/tenant-a`), as Keycloak realms or Entra tenants have. */
  readonly path?: string
  /** Refresh tokens rotate (oidc-provider's default for public clients; here for every client when true). */
  readonly rotateRefreshTokens?: boolean
}

export async function startUpstreamIdp(options: UpstreamIdpOptions): Promise<UpstreamIdp> {
  let handler: http.RequestListener = (_req, res) => { res.statusCode = 503; res.end() }
  const requests: string[] = []
  const state = { down: false }
  const server = http.createServer((req, res) => {
    requests.push(req.url ?? '')
    if (state.down) {
      res.statusCode = 503
      res.end('down')
      return
    }
    handler(req, res)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const issuer = `${origin}${options.path ?? ''}`
  const accounts = options.accounts ?? {}
  const deleted = new Set<string>()
  const provider = new Provider(issuer, {
    clients: [...options.clients],
    // A login name that is not an account still signs in (devInteractions), with no claims but sub.
    findAccount: (_ctx, id) => (deleted.has(id) ? undefined : { accountId: id, claims: () => ({ sub: id, ...accounts[id] }) }),
    claims: {
      openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'], groups: ['groups'],
      tenant: ['tid', 'oid'],
    },
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups', 'tenant'],
    // The scope's claims in the ID token too, as Entra, Okta and Keycloak put them there.
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
    rotateRefreshToken: options.rotateRefreshTokens ?? true,
    cookies: { keys: ['upstream-idp-test-cookie-key-0123456789'] },
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, RefreshToken: 3600, Session: 3600, Interaction: 600, Grant: 3600 },
  })
  provider.proxy = false
  const callback = provider.callback()
  if (options.path) {
    handler = (req, res) => {
      if (req.url?.startsWith(options.path!)) {
        req.url = req.url.slice(options.path!.length) || '/'
        callback(req, res)
      } else {
        res.statusCode = 404
        res.end()
      }
    }
  } else handler = callback
  return {
    issuer,
    provider,
    get down() { return state.down },
    set down(value: boolean) { state.down = value },
    requests,
    deleteAccount: (login) => { deleted.add(login) },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }
}
