/**
 * What `identity_providers[].preset` fills in: how each provider names its users, their groups and their
 * tenant, and which scopes release them. A key set in the YAML wins over the preset's (a `claims` entry
 * replaces the preset's entry of that name). docs/identity-providers.md says per preset what was tested.
 */
import type { IdentityProviderPreset } from '../../config/constants.js'

export interface PresetDefaults {
  readonly kind: 'oidc' | 'github'
  readonly issuer?: string
  readonly scopes: readonly string[]
  /** Upstream claim paths joined with `:` to make the upstream subject. */
  readonly subject: readonly string[]
  /** Our claim → the upstream claim path that fills it. */
  readonly claims: Readonly<Record<string, string>>
  readonly name: string
  /** The provider's e-mail addresses are not verified by it: `allow.email_domains` would be a takeover (nOAuth). */
  readonly unverifiedEmail?: true
}

/** The claims every OpenID Connect provider names the same way (OIDC Core §5.1). */
const STANDARD: Readonly<Record<string, string>> = {
  email: 'email', email_verified: 'email_verified', name: 'name', preferred_username: 'preferred_username',
}

export const GENERIC_OIDC: PresetDefaults = {
  kind: 'oidc', scopes: ['openid', 'email', 'profile'], subject: ['sub'], claims: { ...STANDARD, groups: 'groups' }, name: 'your identity provider',
}

export const IDENTITY_PRESETS: Readonly<Record<IdentityProviderPreset, PresetDefaults>> = {
  // Microsoft identity platform v2: `sub` is pairwise per application; `oid` is the user in the tenant and `tid`
  // the tenant, so together they name one person across applications. `email` is whatever the tenant typed in.
  entra: {
    kind: 'oidc', scopes: ['openid', 'email', 'profile'], subject: ['tid', 'oid'], name: 'Microsoft',
    claims: { email: 'email', name: 'name', preferred_username: 'preferred_username', groups: 'groups', roles: 'roles', tid: 'tid' },
    unverifiedEmail: true,
  },
  google: {
    kind: 'oidc', issuer: 'https://accounts.google.com', scopes: ['openid', 'email', 'profile'], subject: ['sub'], name: 'Google',
    // `hd`: the Google Workspace domain of the account (absent for a consumer account).
    claims: { email: 'email', email_verified: 'email_verified', name: 'name', hd: 'hd' },
  },
  // Okta releases `groups` with the groups scope and a groups claim on the authorization server.
  okta: { kind: 'oidc', scopes: ['openid', 'email', 'profile', 'groups'], subject: ['sub'], name: 'Okta', claims: { ...STANDARD, groups: 'groups' } },
  // Keycloak: `groups` needs the client's "Group Membership" mapper; realm roles come in realm_access.roles.
  keycloak: {
    kind: 'oidc', scopes: ['openid', 'email', 'profile'], subject: ['sub'], name: 'Keycloak',
    claims: { ...STANDARD, groups: 'groups', roles: 'realm_access.roles' },
  },
  // Auth0: custom claims (groups, roles) are namespaced by an Action; map them in `claims`.
  auth0: { kind: 'oidc', scopes: ['openid', 'email', 'profile'], subject: ['sub'], name: 'Auth0', claims: { ...STANDARD } },
  // GitHub is OAuth 2.0 without OpenID Connect: the user comes from its REST API (github.ts).
  github: {
    kind: 'github', scopes: ['read:user', 'user:email', 'read:org'], subject: ['id'], name: 'GitHub',
    claims: { preferred_username: 'login', name: 'name', email: 'email', email_verified: 'email_verified', groups: 'groups' },
  },
}
