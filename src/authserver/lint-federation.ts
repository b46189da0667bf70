/**
 * Config-time checks of `identity_providers[]`, `access_token.claims` and `clients[].post_logout_redirect_uris`:
 * a provider that could not work (no issuer, two secrets, an unreadable file), or one that would let the wrong
 * people in (an e-mail domain rule on addresses nobody verified, a multi-tenant Entra app open to every tenant).
 */
import { readable } from '../config/files.js'
import { isLoopbackHost } from '../config/loopback.js'
import type { AuthorizationServerConfig, GatewayConfig, IdentityProviderConfig } from '../config/schema.js'
import type { Problem } from '../common/problem.js'
import { compilePath } from '../claims/conditions.js'
import { IDENTITY_PRESETS } from './federation/presets.js'
import { redirectUriProblem } from './lint-redirect-uri.js'

/** Claims an access token sets itself (RFC 9068 §2.2, RFC 7519 §4.1, RFC 8693 §4, RFC 9449 §6): never a user's. */
const RESERVED_CLAIMS = new Set(['iss', 'sub', 'aud', 'exp', 'nbf', 'iat', 'jti', 'client_id', 'scope', 'cnf', 'auth_time', 'act', 'may_act', 'azp', 'acr', 'amr'])

/** Entra's issuers that are not one tenant: anyone with an account in any tenant could sign in. */
const ENTRA_SHARED_TENANTS = /^https:\/\/login\.microsoftonline\.com\/(organizations|common|consumers)\/v2\.0\/?$/

function lintProvider(config: GatewayConfig, provider: IdentityProviderConfig, at: Array<string | number>, problems: Problem[]): void {
  const as = config.authorization_server!
  const preset = provider.preset !== undefined ? IDENTITY_PRESETS[provider.preset] : undefined
  const kind = preset?.kind ?? 'oidc'
  const issuer = provider.issuer ?? preset?.issuer
  if (kind === 'oidc' && issuer === undefined) problems.push({ path: at, message: 'missing required key "issuer" (its OpenID Connect discovery starts there)' })
  if (kind === 'github' && provider.issuer !== undefined) problems.push({ path: [...at, 'issuer'], message: 'GitHub is not an OpenID Connect issuer: set github.web_url and github.api_url for GitHub Enterprise Server' })
  if (kind === 'oidc' && provider.github !== undefined) problems.push({ path: [...at, 'github'], message: 'is only used with preset: github' })
  const urls = kind === 'github' ? [provider.github?.web_url, provider.github?.api_url] : [issuer]
  for (const url of urls) {
    if (url !== undefined && url.startsWith('http:') && !isLoopbackHost(new URL(url).hostname) && !config.server?.allow_insecure_http) {
      problems.push({ path: [...at, kind === 'github' ? 'github' : 'issuer'], message: 'uses http:// off loopback: the sign-in\'s code and tokens would cross the network in clear; use https://, or set server.allow_insecure_http: true' })
    }
  }
  const credentials = [provider.client_secret, provider.client_secret_file, provider.private_key_jwt].filter((value) => value !== undefined).length
  if (credentials > 1) problems.push({ path: at, message: 'set at most one of client_secret, client_secret_file and private_key_jwt' })
  if (kind === 'github' && (provider.client_secret === undefined && provider.client_secret_file === undefined)) {
    problems.push({ path: at, message: 'GitHub needs client_secret or client_secret_file' })
  }
  if (kind === 'github' && provider.private_key_jwt !== undefined) problems.push({ path: [...at, 'private_key_jwt'], message: 'GitHub does not take private_key_jwt' })
  for (const file of [provider.client_secret_file, provider.private_key_jwt?.key_file]) {
    if (file !== undefined && !readable(file)) problems.push({ path: [...at, file === provider.client_secret_file ? 'client_secret_file' : 'private_key_jwt'], message: `cannot read ${file}` })
  }
  const subject = provider.subject?.claim
  for (const [index, path] of (typeof subject === 'string' ? [subject] : subject ?? []).entries()) {
    compilePath(path, [...at, 'subject', 'claim', ...(typeof subject === 'string' ? [] : [index])], problems)
  }
  for (const [name, path] of Object.entries(provider.claims ?? {})) compilePath(path, [...at, 'claims', name], problems)
  if (provider.allow?.email_domains && preset?.unverifiedEmail) {
    problems.push({ path: [...at, 'allow', 'email_domains'], message: `${provider.preset} does not verify e-mail addresses: anyone can claim any domain there (use allow.tenants or allow.groups)` })
  }
  if (provider.preset === 'entra' && issuer !== undefined && ENTRA_SHARED_TENANTS.test(issuer) && !provider.allow?.tenants) {
    problems.push({ path: [...at, 'allow'], message: 'a multi-tenant Entra issuer lets every tenant\'s users in: set allow.tenants to the tenant ids you trust' })
  }
  if (provider.refresh_check) {
    if (as.signing?.key_encryption_key === undefined && as.store?.type !== 'memory') {
      problems.push({ path: [...at, 'refresh_check'], message: 'keeps each user\'s upstream refresh token in the store: set signing.key_encryption_key to seal them' })
    }
    if (kind === 'oidc' && provider.scopes !== undefined && !provider.scopes.includes('offline_access')) {
      problems.push({ path: [...at, 'scopes'], message: 'refresh_check needs offline_access (an upstream refresh token to ask with)' })
    }
  }
}

export function lintFederation(config: GatewayConfig, as: AuthorizationServerConfig, problems: Problem[]): void {
  const base = ['authorization_server']
  const ids = new Map<string, number>()
  ;(as.identity_providers ?? []).forEach((provider, index) => {
    const at = [...base, 'identity_providers', index]
    if (ids.has(provider.id)) problems.push({ path: [...at, 'id'], message: `duplicate id (also identity_providers[${ids.get(provider.id)}])` })
    ids.set(provider.id, index)
    lintProvider(config, provider, at, problems)
  })
  // A provider's users are `<id>:<subject>`: a configured user must not be able to be one of them.
  ;(as.users ?? []).forEach((user, index) => {
    const sub = user.sub ?? user.username
    const prefix = sub.includes(':') ? sub.slice(0, sub.indexOf(':')) : undefined
    if (prefix !== undefined && ids.has(prefix)) {
      problems.push({ path: [...base, 'users', index, user.sub !== undefined ? 'sub' : 'username'], message: `subject "${sub}" is in the namespace of identity provider ${prefix}` })
    }
  })
  ;(as.access_token?.claims ?? []).forEach((name, index) => {
    if (RESERVED_CLAIMS.has(name)) problems.push({ path: [...base, 'access_token', 'claims', index], message: `${name} is set by the server itself (RFC 9068 §2.2)` })
  })
  ;(as.clients ?? []).forEach((client, index) => {
    ;(client.post_logout_redirect_uris ?? []).forEach((uri, position) => {
      const problem = redirectUriProblem(uri)
      if (problem) problems.push({ path: [...base, 'clients', index, 'post_logout_redirect_uris', position], message: problem })
    })
  })
}
