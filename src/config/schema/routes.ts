/**
 * `routes[]` and what they carry (required scopes, CORS overrides, MCP rules), the top-level `cors`, and the
 * RFC 9728 protected resources (`resources[]`) the routes make up.
 */
import { Type, type Static } from '@sinclair/typebox'
import { HTTP_METHODS } from '../constants.js'
import { ClaimConditions, ClaimHeaders } from './claims.js'
import { DpopMode, Duration, HeaderName, NonEmpty, ScopeTokenPattern, Size, Strict, StringEnum } from './shared.js'

export { HTTP_METHODS }

const Scopes = Strict({
  all: Type.Optional(Type.Array(NonEmpty)),
  any: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
})

/** CORS at the gateway (src/cors/): the top-level `cors` settings, and what a route's `cors` may override. */
const CorsFields = {
  allowed_origins: Type.Optional(Type.Array(NonEmpty)),
  allowed_methods: Type.Optional(Type.Array(StringEnum(HTTP_METHODS), { minItems: 1 })),
  allowed_headers: Type.Optional(Type.Array(HeaderName)),
  exposed_headers: Type.Optional(Type.Array(HeaderName)),
  allow_credentials: Type.Optional(Type.Boolean()),
  max_age: Type.Optional(Duration),
}
export const Cors = Strict({ ...CorsFields, allowed_origins: Type.Array(NonEmpty) })
const RouteCorsObject = Strict({ ...CorsFields, upstream: Type.Optional(Type.Boolean()) })
/** A route's `cors`: `false` (off), `true` (the top-level settings, as when absent) or overrides; no union noise. */
const RouteCors = Type.Unsafe<boolean | Static<typeof RouteCorsObject>>({ ...RouteCorsObject, type: ['boolean', 'object'] })

/** `routes[].mcp` (src/mcp/): per-tool, per-prompt and per-method rules of an MCP server's route; names checked by lint. */
const McpRule = Strict({ scopes: Type.Optional(Scopes), claims: Type.Optional(ClaimConditions) })
const McpRules = Strict({
  tools: Type.Optional(Type.Record(Type.String(), McpRule)),
  prompts: Type.Optional(Type.Record(Type.String(), McpRule)),
  methods: Type.Optional(Type.Record(Type.String(), McpRule)),
})

export const Route = Strict({
  id: Type.String({ pattern: '^[A-Za-z0-9_.:-]+$', 'x-message': 'must be letters, digits and _ . : -' }),
  path: Type.String({ pattern: '^/', 'x-message': 'must start with /' }),
  methods: Type.Optional(Type.Array(StringEnum(HTTP_METHODS), { minItems: 1 })),
  upstream: NonEmpty,
  auth: Type.Optional(StringEnum(['required', 'optional', 'none'] as const)),
  scopes: Type.Optional(Scopes),
  claims: Type.Optional(ClaimConditions),
  claim_headers: Type.Optional(ClaimHeaders),
  max_body_size: Type.Optional(Size),
  cors: Type.Optional(RouteCors),
  mcp: Type.Optional(McpRules),
  dpop: Type.Optional(DpopMode),
  // The rate limit policies of this route (instead of rate_limits.default; [] for none), and whether its
  // responses carry the RateLimit-Policy and RateLimit fields (src/ratelimit/).
  rate_limits: Type.Optional(Type.Array(NonEmpty)),
  rate_limit_headers: Type.Optional(Type.Boolean()),
})

/** RFC 9728 §2: a protected resource, its identifier and the routes that are it. */
const ResourceUrl = Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL without query or fragment' })
export const Resource = Strict({
  resource: ResourceUrl,
  routes: Type.Array(Type.String({ pattern: '^[A-Za-z0-9_.:-]+$', 'x-message': 'must be a route id' }), { minItems: 1 }),
  // Other `aud` values its routes accept besides `resource` (tokens minted before resource indicators).
  audience: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  authorization_servers: Type.Optional(Type.Array(ResourceUrl, { minItems: 1 })),
  scopes_supported: Type.Optional(Type.Array(ScopeTokenPattern())),
  resource_name: Type.Optional(NonEmpty),
  resource_documentation: Type.Optional(ResourceUrl),
  resource_policy_uri: Type.Optional(ResourceUrl),
  resource_tos_uri: Type.Optional(ResourceUrl),
})

export type RouteConfig = Static<typeof Route>
export type McpConfig = Static<typeof McpRules>
export type McpRuleConfig = Static<typeof McpRule>
export type ResourceConfig = Static<typeof Resource>
export type CorsConfig = Static<typeof Cors>
export type RouteCorsConfig = Static<typeof RouteCorsObject>
export type HttpMethod = (typeof HTTP_METHODS)[number]
