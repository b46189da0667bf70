/**
 * The one schema of `portcullis.yaml`. The TypeScript type, the validation and the defaults documented in
 * docs/configuration.md all come from here; every object rejects unknown keys, so a typo never silently
 * weakens security. The sections live in schema/: the gateway's (gateway.ts, issuers.ts, routes.ts, with
 * claims.ts), the embedded authorization server's (authorization-server.ts), and what they share (shared.ts).
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { AuthorizationServer } from './schema/authorization-server.js'
import { Admin, Audit, Cache, Decision, Dpop, Forward, Log, RateLimits, Server, Tracing, Upstream } from './schema/gateway.js'
import { Issuer } from './schema/issuers.js'
import { Cors, Resource, Route } from './schema/routes.js'
import { NonEmpty, Strict } from './schema/shared.js'

export { CLIENT_AUTH_METHODS, GRANT_TYPES } from './schema/authorization-server.js'
export { JWS_ALGORITHMS } from './schema/issuers.js'
export { HTTP_METHODS } from './schema/routes.js'
export type { AuthorizationServerConfig, ClientConfig, GrantType, UserConfig } from './schema/authorization-server.js'
export type { IdentityProviderConfig } from './schema/identity-providers.js'
export type {
  AuditConfig, CacheConfig, DecisionConfig, DpopConfig, ForwardConfig, RateLimitPolicyConfig, RateLimitsConfig, TracingConfig,
  UpstreamConfig,
} from './schema/gateway.js'
export type { IntrospectionConfig, IssuerConfig, JwsAlgorithm } from './schema/issuers.js'
export type { CorsConfig, HttpMethod, McpConfig, McpRuleConfig, ResourceConfig, RouteConfig, RouteCorsConfig } from './schema/routes.js'
export type { DpopModeConfig } from './schema/shared.js'

export const GatewayConfigSchema = Strict({
  server: Type.Optional(Server),
  admin: Type.Optional(Admin),
  log: Type.Optional(Log),
  upstreams: Type.Record(Type.String({ pattern: '^[A-Za-z0-9_.-]+$' }), Upstream, {
    additionalProperties: false, minProperties: 1, 'x-message': 'upstream names are letters, digits and _ . -',
  }),
  issuers: Type.Optional(Type.Array(Issuer)),
  routes: Type.Array(Route, { minItems: 1 }),
  forward: Type.Optional(Forward),
  cache: Type.Optional(Cache),
  authorization_server: Type.Optional(AuthorizationServer),
  audit: Type.Optional(Audit),
  resources: Type.Optional(Type.Array(Resource)),
  cors: Type.Optional(Cors),
  /** `scope_implies` (src/authz/hierarchy.ts): a scope → the narrower scopes it implies. */
  scope_implies: Type.Optional(Type.Record(Type.String({ minLength: 1 }), Type.Array(NonEmpty, { minItems: 1 }))),
  dpop: Type.Optional(Dpop),
  rate_limits: Type.Optional(RateLimits),
  tracing: Type.Optional(Tracing),
  decision: Type.Optional(Decision),
})

export type GatewayConfig = Static<typeof GatewayConfigSchema>
export type { TSchema }
