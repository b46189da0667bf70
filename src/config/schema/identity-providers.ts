/**
 * `authorization_server.identity_providers`: upstream identity providers the embedded server signs people in
 * with (OpenID Connect, or GitHub's OAuth 2.0 with its user API), and how their identities map to ours
 * (authserver/federation/).
 */
import { Type, type Static } from '@sinclair/typebox'
import { IDENTITY_PROVIDER_PRESETS } from '../constants.js'
import { ClaimPathText } from './claims.js'
import { Duration, NonEmpty, ScopeTokenPattern, Strict, StringEnum } from './shared.js'

const ScopeToken = ScopeTokenPattern()

const IdentityProvider = Strict({
  // The callback path is `<issuer>/callback/<id>`, and the provider's users' `sub` starts with `<id>:`.
  id: Type.String({ pattern: '^[a-z0-9][a-z0-9_-]{0,31}$', 'x-message': 'must be 1-32 lower-case letters, digits, _ or -, starting with a letter or digit' }),
  preset: Type.Optional(StringEnum(IDENTITY_PROVIDER_PRESETS)),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  issuer: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL without query or fragment' })),
  client_id: NonEmpty,
  client_secret: Type.Optional(Type.String({ minLength: 1 })),
  client_secret_file: Type.Optional(NonEmpty),
  private_key_jwt: Type.Optional(Strict({
    key_file: NonEmpty,
    alg: Type.Optional(StringEnum(['RS256', 'PS256', 'ES256', 'EdDSA'] as const)),
    kid: Type.Optional(NonEmpty),
  })),
  scopes: Type.Optional(Type.Array(ScopeToken, { minItems: 1 })),
  subject: Type.Optional(Strict({
    claim: Type.Optional(Type.Union([ClaimPathText, Type.Array(ClaimPathText, { minItems: 1, maxItems: 4 })],
      { 'x-message': 'must be a claim path or a list of claim paths' })),
    scope: Type.Optional(StringEnum(['provider', 'global'] as const)),
  })),
  // Our claim name → the upstream claim path that fills it.
  claims: Type.Optional(Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$' }), ClaimPathText)),
  allow: Type.Optional(Strict({
    email_domains: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Za-z0-9.-]+$', 'x-message': 'must be a domain name' }), { minItems: 1 })),
    groups: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
    tenants: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  })),
  userinfo: Type.Optional(Type.Boolean()),
  logout: Type.Optional(Strict({ upstream: Type.Optional(Type.Boolean()) })),
  refresh_check: Type.Optional(Type.Boolean()),
  timeout: Type.Optional(Duration),
  // GitHub Enterprise Server (or a stand-in): where its pages and its REST API live.
  github: Type.Optional(Strict({
    web_url: Type.Optional(Type.String({ pattern: '^https?://[^?#]+$', 'x-message': 'must be an http(s) URL' })),
    api_url: Type.Optional(Type.String({ pattern: '^https?://[^?#]+$', 'x-message': 'must be an http(s) URL' })),
  })),
})

export const IdentityProviders = Type.Array(IdentityProvider, { maxItems: 20 })
export type IdentityProviderConfig = Static<typeof IdentityProvider>
