/** `issuers[]`: the token issuers the gateway trusts, their keys or introspection endpoint, and their claims. */
import { Type, type Static } from '@sinclair/typebox'
import { PRESETS } from '../constants.js'
import { ClaimConditions, ClaimHeaders, ClaimPathText, OneOrMorePaths } from './claims.js'
import { DpopMode, Duration, NonEmpty, Strict, StringEnum } from './shared.js'

/** Asymmetric JWS algorithms only: `none` and HS* are never accepted for keys that come from a JWKS. */
export const JWS_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const

const Introspection = Strict({
  endpoint: Type.String({ pattern: '^https?://', 'x-message': 'must be an http:// or https:// URL' }),
  token_prefix: Type.Optional(Type.String()),
  client_id: NonEmpty,
  client_secret: NonEmpty,
  auth_method: Type.Optional(StringEnum(['client_secret_basic', 'client_secret_post'] as const)),
  timeout: Type.Optional(Duration),
  cache_ttl: Type.Optional(Duration),
  negative_cache_ttl: Type.Optional(Duration),
  ca_file: Type.Optional(NonEmpty),
})

export const Issuer = Strict({
  issuer: NonEmpty,
  dpop: Type.Optional(DpopMode),
  jwks_uri: Type.Optional(Type.String({ pattern: '^(https?|file)://', 'x-message': 'must be an http://, https:// or file:// URL' })),
  jwks_file: Type.Optional(NonEmpty),
  discovery: Type.Optional(Type.Boolean()),
  audience: Type.Array(NonEmpty, { minItems: 1 }),
  algorithms: Type.Optional(Type.Array(StringEnum(JWS_ALGORITHMS,
    `must be one of ${JWS_ALGORITHMS.join(', ')} (none and HS* are never accepted)`), { minItems: 1 })),
  clock_skew: Type.Optional(Duration),
  // Where the token's permissions are: `scope`, `scp`, `scope_array` or any claim path, or a list of them (claims/issuer.ts).
  scope_claim: Type.Optional(OneOrMorePaths),
  preset: Type.Optional(StringEnum(PRESETS)),
  client_id_claim: Type.Optional(OneOrMorePaths),
  audience_claim: Type.Optional(ClaimPathText),
  claims: Type.Optional(ClaimConditions),
  claim_headers: Type.Optional(ClaimHeaders),
  require_typ: Type.Optional(NonEmpty),
  jwks_cooldown: Type.Optional(Duration),
  jwks_max_age: Type.Optional(Duration),
  introspection: Type.Optional(Introspection),
})

export type IssuerConfig = Static<typeof Issuer>
export type IntrospectionConfig = Static<typeof Introspection>
export type JwsAlgorithm = (typeof JWS_ALGORITHMS)[number]
