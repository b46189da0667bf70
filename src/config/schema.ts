/**
 * The one schema of `portcullis.yaml`. The TypeScript type, the validation and the defaults documented in
 * docs/configuration.md all come from here; every object rejects unknown keys, so a typo never silently
 * weakens security.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { DPOP_ALGORITHMS, KEK_FORMAT, KEK_PATTERN, PRESETS } from './constants.js'

/** A string enum that Ajv reports as one clean `enum` error (a union of literals would report noise). */
function StringEnum<const T extends readonly string[]>(values: T, message?: string) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...(message ? { 'x-message': message } : {}) })
}

function Strict<T extends Parameters<typeof Type.Object>[0]>(properties: T) {
  return Type.Object(properties, { additionalProperties: false })
}

function ScopeTokenPattern() {
  return Type.String({ pattern: '^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$', 'x-message': 'must be a scope-token (RFC 6749 §3.3: printable ASCII, no space, " or \\)' })
}

const Duration = Type.String({
  pattern: '^[0-9]+(ms|s|m|h|d)$',
  'x-message': 'must be a duration such as 30s, 5m or 1h',
})
const Size = Type.String({
  pattern: '^[0-9]+(b|kb|mb|gb)$',
  'x-message': 'must be a size such as 512kb, 10mb or 1gb',
})
const HostPort = Type.String({
  pattern: '^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):[0-9]{1,5}$',
  'x-message': 'must be host:port, such as 127.0.0.1:8080 or [::1]:8080',
})
const NonEmpty = Type.String({ minLength: 1 })
const HeaderName = Type.String({
  pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
  'x-message': 'must be an HTTP header name',
})

/** Asymmetric JWS algorithms only: `none` and HS* are never accepted for keys that come from a JWKS. */
export const JWS_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

const Server = Strict({
  listen: Type.Optional(HostPort),
  max_body_size: Type.Optional(Size),
  max_header_size: Type.Optional(Size),
  max_token_size: Type.Optional(Size),
  public_url: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL' })),
  realm: Type.Optional(Type.String({ pattern: '^[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]*$', 'x-message': 'must be printable ASCII without quotes or backslashes' })),
  tls: Type.Optional(Strict({ cert_file: NonEmpty, key_file: NonEmpty })),
  shutdown_timeout: Type.Optional(Duration),
  // http:// off loopback for issuer keys, discovery, introspection and the embedded issuer (lint.ts): an error without it.
  allow_insecure_http: Type.Optional(Type.Boolean()),
  body_buffer_size: Type.Optional(Size),
  body_timeout: Type.Optional(Duration),
  body_min_rate: Type.Optional(Size),
  // Issue 24: worker processes sharing the listeners (node:cluster); `auto` = the CPUs this process may use.
  workers: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 256 }), Type.Literal('auto')],
    { 'x-message': 'must be a number of workers from 1 to 256, or auto' })),
})

const Admin = Strict({ listen: Type.Optional(HostPort) })

const Upstream = Strict({
  url: Type.String({
    pattern: '^(https?://[^/?#]+/?|builtin:echo)$',
    'x-message': 'must be an http:// or https:// origin (scheme, host, optional port; no path) or builtin:echo',
  }),
  timeout: Type.Optional(Duration),
  ca_file: Type.Optional(NonEmpty),
  connections: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })),
  queue_timeout: Type.Optional(Duration),
})

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

/** A claim path (claims/path.ts): `tenant`, `realm_access.roles`, `["https://example.com/roles"]`; parsed by lint. */
const ClaimPathText = Type.String({ minLength: 1, maxLength: 256, 'x-message': 'must be a claim path of at most 256 characters' })
const ClaimScalar = Type.Union([Type.String(), Type.Number(), Type.Boolean()])
const ClaimOperand = Type.Union([
  ClaimScalar,
  Strict({ param: Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$', 'x-message': 'must be a path parameter name' }) }),
  Strict({ header: HeaderName }),
], { 'x-message': 'must be a string, number or boolean, { param: name } or { header: Name }' })
const ClaimCondition = Strict({
  claim: ClaimPathText,
  equals: Type.Optional(ClaimOperand),
  contains: Type.Optional(ClaimOperand),
  one_of: Type.Optional(Type.Array(ClaimScalar, { minItems: 1 })),
  present: Type.Optional(Type.Literal(true, { 'x-message': 'must be true (a claim that must be absent is not a condition)' })),
})
const ClaimConditions = Strict({
  all: Type.Optional(Type.Array(ClaimCondition)),
  any: Type.Optional(Type.Array(ClaimCondition, { minItems: 1 })),
})
/** Header name → claim path; names checked against the reserved ones by lint. */
const ClaimHeaders = Type.Record(Type.String(), ClaimPathText)
const OneOrMorePaths = Type.Union([ClaimPathText, Type.Array(ClaimPathText, { minItems: 1 })],
  { 'x-message': 'must be a claim path or a list of claim paths' })

/** Issue 20: whether a route (or an issuer's tokens) takes DPoP-bound tokens with proofs (src/dpop/). */
const DpopMode = StringEnum(['required', 'allowed', 'off'] as const)

const Issuer = Strict({
  issuer: NonEmpty,
  dpop: Type.Optional(DpopMode),
  jwks_uri: Type.Optional(Type.String({ pattern: '^(https?|file)://', 'x-message': 'must be an http://, https:// or file:// URL' })),
  jwks_file: Type.Optional(NonEmpty),
  discovery: Type.Optional(Type.Boolean()),
  audience: Type.Array(NonEmpty, { minItems: 1 }),
  algorithms: Type.Optional(Type.Array(StringEnum(JWS_ALGORITHMS,
    `must be one of ${JWS_ALGORITHMS.join(', ')} (none and HS* are never accepted)`), { minItems: 1 })),
  clock_skew: Type.Optional(Duration),
  // Issue 17: `scope`, `scp`, `scope_array` or any claim path, or a list of them (claims/issuer.ts).
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

const Scopes = Strict({
  all: Type.Optional(Type.Array(NonEmpty)),
  any: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
})

/** CORS at the gateway (issue 18, src/cors/): the top-level settings, and what a route may override. */
const CorsFields = {
  allowed_origins: Type.Optional(Type.Array(NonEmpty)),
  allowed_methods: Type.Optional(Type.Array(StringEnum(HTTP_METHODS), { minItems: 1 })),
  allowed_headers: Type.Optional(Type.Array(HeaderName)),
  exposed_headers: Type.Optional(Type.Array(HeaderName)),
  allow_credentials: Type.Optional(Type.Boolean()),
  max_age: Type.Optional(Duration),
}
const Cors = Strict({ ...CorsFields, allowed_origins: Type.Array(NonEmpty) })
const RouteCorsObject = Strict({ ...CorsFields, upstream: Type.Optional(Type.Boolean()) })
/** A route's `cors`: `false` (off), `true` (the top-level settings, as when absent) or overrides; no union noise. */
const RouteCors = Type.Unsafe<boolean | Static<typeof RouteCorsObject>>({ ...RouteCorsObject, type: ['boolean', 'object'] })

/** Issue 19 (src/mcp/): per-tool, per-prompt and per-method rules of an MCP server's route; names checked by lint. */
const McpRule = Strict({ scopes: Type.Optional(Scopes), claims: Type.Optional(ClaimConditions) })
const McpRules = Strict({
  tools: Type.Optional(Type.Record(Type.String(), McpRule)),
  prompts: Type.Optional(Type.Record(Type.String(), McpRule)),
  methods: Type.Optional(Type.Record(Type.String(), McpRule)),
})

const Route = Strict({
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
  // Issue 21: the rate limit policies of this route (instead of rate_limits.default; [] for none), and whether its
  // responses carry the RateLimit-Policy and RateLimit fields.
  rate_limits: Type.Optional(Type.Array(NonEmpty)),
  rate_limit_headers: Type.Optional(Type.Boolean()),
})

/** RFC 9728 (issue 18): a protected resource, its identifier and the routes that are it. */
const ResourceUrl = Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL without query or fragment' })
const Resource = Strict({
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

const Forward = Strict({
  identity_headers: Type.Optional(Strict({
    subject: Type.Optional(HeaderName),
    client_id: Type.Optional(HeaderName),
    scopes: Type.Optional(HeaderName),
    issuer: Type.Optional(HeaderName),
  })),
  strip_authorization: Type.Optional(Type.Boolean()),
  trust_forwarded_headers: Type.Optional(Type.Boolean()),
  strip_headers: Type.Optional(Type.Array(HeaderName)),
})

/** Grant types the embedded server implements (the device URN and authorization_code arrive with the browser flows). */
export const GRANT_TYPES = [
  'authorization_code', 'client_credentials', 'refresh_token', 'password', 'urn:ietf:params:oauth:grant-type:device_code',
] as const
export const CLIENT_AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'none'] as const
const ScopeToken = ScopeTokenPattern()

const Client = Strict({
  // Copied into identity headers: no `,` or `"` (docs/configuration.md, identity header values).
  client_id: Type.String({ pattern: '^[\\x21\\x23-\\x2b\\x2d-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters other than , and "' }),
  client_secret: Type.Optional(Type.String({ minLength: 16, 'x-message': 'must be at least 16 characters' })),
  client_secret_hash: Type.Optional(Type.String({ pattern: '^scrypt\\$', 'x-message': 'must be the output of `portcullis hash-secret`' })),
  token_endpoint_auth_method: Type.Optional(StringEnum(CLIENT_AUTH_METHODS)),
  grant_types: Type.Array(StringEnum(GRANT_TYPES), { minItems: 1 }),
  redirect_uris: Type.Optional(Type.Array(NonEmpty)),
  require_state: Type.Optional(Type.Boolean()),
  require_pkce: Type.Optional(Type.Boolean()),
  first_party: Type.Optional(Type.Boolean()),
  refresh_token_reuse_grace: Type.Optional(Duration),
  scopes: Type.Array(ScopeToken),
  audience: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  name: Type.Optional(NonEmpty),
  id_token_signed_response_alg: Type.Optional(StringEnum(['RS256', 'ES256', 'EdDSA'] as const)),
  // Issue 20: the client must send a DPoP proof to /token (RFC 9449 §5.2, the client metadata of that name).
  dpop_bound_access_tokens: Type.Optional(Type.Boolean()),
})

const User = Strict({
  // Copied into identity headers: no `,` or `"` (docs/configuration.md, identity header values).
  username: Type.String({ pattern: '^[\\x21\\x23-\\x2b\\x2d-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters other than , and "' }),
  sub: Type.Optional(Type.String({ pattern: '^[\\x21-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters' })),
  password: Type.Optional(NonEmpty),
  password_hash: Type.Optional(Type.String({ pattern: '^scrypt\\$', 'x-message': 'must be the output of `portcullis hash-secret`' })),
  claims: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
})

// Issue 19: the redirect URI forms a registration or a metadata document may use (authserver/registration/redirect-uris.ts).
const RedirectUriForms = Type.Array(StringEnum(['loopback', 'localhost', 'https', 'private_use'] as const), { minItems: 1 })

const AuthorizationServer = Strict({
  enabled: Type.Boolean(),
  issuer: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL without query or fragment' })),
  store: Type.Optional(Strict({
    type: StringEnum(['sqlite', 'memory', 'redis'] as const),
    path: Type.Optional(NonEmpty),
    // redis only (lint-authserver.ts): redis:// or rediss://, and the key prefix with its {hash tag}.
    url: Type.Optional(NonEmpty),
    prefix: Type.Optional(NonEmpty),
  })),
  signing: Type.Optional(Strict({
    algorithm: Type.Optional(StringEnum(['ES256', 'RS256', 'EdDSA'] as const)),
    rotation_publish_delay: Type.Optional(Duration),
    // Issue 16: seals the private signing keys in the store (authserver/key-encryption.ts); from ${ENV}.
    key_encryption_key: Type.Optional(Type.String({ pattern: KEK_PATTERN, 'x-message': KEK_FORMAT })),
  })),
  access_token: Type.Optional(Strict({
    format: Type.Optional(StringEnum(['jwt', 'opaque'] as const)),
    ttl: Type.Optional(Duration),
    audience: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  })),
  // reuse_grace: at most 10s (lint-authserver.ts).
  refresh_token: Type.Optional(Strict({ ttl: Type.Optional(Duration), reuse_grace: Type.Optional(Duration) })),
  authorization_code: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  session: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  consent: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  clients: Type.Optional(Type.Array(Client)),
  users: Type.Optional(Type.Array(User)),
  throttling: Type.Optional(Strict({
    failures_per_client: Type.Optional(Type.Integer({ minimum: 1 })),
    failures_per_ip: Type.Optional(Type.Integer({ minimum: 1 })),
    window: Type.Optional(Duration),
  })),
  // Issue 19: RFC 7591 dynamic client registration and RFC 7592 management (authserver/registration/); lint-authserver.ts.
  registration: Type.Optional(Strict({
    enabled: Type.Boolean(),
    // Normally ${ENV}: required as a Bearer token on /register when set; without it registration is open.
    initial_access_token: Type.Optional(Type.String({ minLength: 16 })),
    policy: Type.Optional(Strict({
      client_types: Type.Optional(Type.Array(StringEnum(['public', 'confidential'] as const), { minItems: 1 })),
      redirect_uris: Type.Optional(RedirectUriForms),
      grant_types: Type.Optional(Type.Array(StringEnum(['authorization_code', 'refresh_token', 'client_credentials',
        'urn:ietf:params:oauth:grant-type:device_code'] as const, 'must be authorization_code, refresh_token, client_credentials or urn:ietf:params:oauth:grant-type:device_code'),
      { minItems: 1 })),
      scopes: Type.Optional(Type.Array(ScopeToken)),
      max_redirect_uris: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
      max_name_length: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    })),
    unused_expiry: Type.Optional(Duration),
    rate: Type.Optional(Strict({ registrations: Type.Optional(Type.Integer({ minimum: 1 })), window: Type.Optional(Duration) })),
  })),
  // Issue 19: OAuth Client ID Metadata Documents (authserver/client-metadata/); lint-authserver.ts bounds the sizes and times.
  client_metadata_documents: Type.Optional(Strict({
    enabled: Type.Optional(Type.Boolean()),
    // Exact host names, or `*.example.com` (one label in place of the `*`); empty: any public host.
    allowed_hosts: Type.Optional(Type.Array(NonEmpty)),
    scopes: Type.Optional(Type.Array(ScopeToken)),
    max_size: Type.Optional(Size),
    timeout: Type.Optional(Duration),
    cache_ttl: Type.Optional(Strict({ min: Type.Optional(Duration), max: Type.Optional(Duration) })),
    allow_private_addresses: Type.Optional(Type.Boolean()),
    redirect_uris: Type.Optional(RedirectUriForms),
    // PEM CAs trusted for document hosts instead of the system's (a private CA); relative to the config file.
    ca_file: Type.Optional(NonEmpty),
  })),
})

/** Issue 22: OpenTelemetry traces over OTLP/HTTP (src/tracing/). */
const Tracing = Strict({
  enabled: Type.Boolean(),
  endpoint: Type.Optional(Type.String({ pattern: '^https?://', 'x-message': 'must be the http(s) URL of an OTLP/HTTP traces endpoint' })),
  headers: Type.Optional(Type.Record(Type.String({ pattern: '^[!#$%&\'*+.^_`|~0-9A-Za-z-]+$' }), Type.String())),
  sample_ratio: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  service_name: Type.Optional(NonEmpty),
  export_delay: Type.Optional(Duration),
  attributes: Type.Optional(Strict({ subject: Type.Optional(Type.Boolean()) })),
})

/** Issue 21: rate limit policies (src/ratelimit/). */
const RateLimitAmount = Strict({ limit: Type.Integer({ minimum: 1 }), burst: Type.Optional(Type.Integer({ minimum: 1 })) })
const RateLimitPolicy = Strict({
  limit: Type.Integer({ minimum: 1 }),
  window: Duration,
  burst: Type.Optional(Type.Integer({ minimum: 1 })),
  key: Type.String({ pattern: '^(client_id|sub|address|claim:.+|header:[!#$%&\'*+.^_`|~0-9A-Za-z-]+)$',
    'x-message': 'must be client_id, sub, address, claim:<claim path> or header:<Header-Name>' }),
  fallback: Type.Optional(StringEnum(['address', 'refuse'] as const)),
  overrides: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 256 }), RateLimitAmount)),
  on_store_failure: Type.Optional(StringEnum(['open', 'closed'] as const)),
})
const RateLimits = Strict({
  store: Type.Optional(Strict({
    type: StringEnum(['memory', 'redis'] as const),
    // redis: the authorization server's store URL and prefix when unset.
    url: Type.Optional(NonEmpty),
    prefix: Type.Optional(NonEmpty),
    timeout: Type.Optional(Duration),
    max_keys: Type.Optional(Type.Integer({ minimum: 100, maximum: 100_000_000 })),
  })),
  policies: Type.Record(Type.String({ pattern: '^[a-z][a-z0-9_-]{0,63}$', 'x-message': 'policy names are lower-case letters, digits, _ and -' }),
    RateLimitPolicy, { minProperties: 1 }),
  default: Type.Optional(Type.Array(NonEmpty)),
})

/** Issue 20: DPoP proof checks, shared by the embedded server's token endpoint and the gateway (src/dpop/settings.ts). */
const Dpop = Strict({
  algorithms: Type.Optional(Type.Array(StringEnum(DPOP_ALGORITHMS), { minItems: 1 })),
  max_age: Type.Optional(Duration),
  clock_skew: Type.Optional(Duration),
  nonce: Type.Optional(Type.Boolean()),
  nonce_lifetime: Type.Optional(Duration),
  // Normally ${ENV}: what every instance signs its nonces with; a random one per process when unset.
  nonce_secret: Type.Optional(Type.String({ minLength: 32, 'x-message': 'must be at least 32 characters' })),
  replay_cache_size: Type.Optional(Type.Integer({ minimum: 1000, maximum: 10_000_000 })),
  forward_proof: Type.Optional(Type.Boolean()),
})

/** Issue 23: the decision endpoint, for a proxy in front that forwards by itself (src/decision/). */
const Decision = Strict({
  listen: HostPort,
  tls: Type.Optional(Strict({ cert_file: NonEmpty, key_file: NonEmpty, client_ca_file: Type.Optional(NonEmpty) })),
  trust: Type.Optional(Strict({
    // CIDR ranges or single addresses; default 127.0.0.0/8 and ::1 when `trust` is absent.
    addresses: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
    // Normally ${ENV}: the value the proxy sends in `secret_header`.
    secret: Type.Optional(Type.String({ minLength: 32, 'x-message': 'must be at least 32 characters' })),
    secret_header: Type.Optional(HeaderName),
    // Subject CN or DNS subjectAltName of a client certificate verified against `tls.client_ca_file`.
    client_certificate_names: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  })),
  cache_ttl: Type.Optional(Duration),
})

const Cache = Strict({
  max_entries: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
  jwt: Type.Optional(Type.Boolean()),
})

const Audit = Strict({
  // `stdout`, a file path, or a list of both.
  output: Type.Optional(Type.Union([NonEmpty, Type.Array(NonEmpty, { minItems: 1, maxItems: 2 })])),
})

const Log = Strict({
  level: Type.Optional(StringEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const)),
  buffer: Type.Optional(Size),
  flush_interval: Type.Optional(Duration),
})

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
  /** Scope hierarchies (issue 19, src/authz/hierarchy.ts): a scope → the narrower scopes it implies. */
  scope_implies: Type.Optional(Type.Record(Type.String({ minLength: 1 }), Type.Array(NonEmpty, { minItems: 1 }))),
  dpop: Type.Optional(Dpop),
  rate_limits: Type.Optional(RateLimits),
  tracing: Type.Optional(Tracing),
  decision: Type.Optional(Decision),
})

export type GatewayConfig = Static<typeof GatewayConfigSchema>
export type RouteConfig = Static<typeof Route>
export type McpConfig = Static<typeof McpRules>
export type McpRuleConfig = Static<typeof McpRule>
export type IssuerConfig = Static<typeof Issuer>
export type UpstreamConfig = Static<typeof Upstream>
export type ForwardConfig = Static<typeof Forward>
export type ResourceConfig = Static<typeof Resource>
export type CorsConfig = Static<typeof Cors>
export type RouteCorsConfig = Static<typeof RouteCorsObject>
export type IntrospectionConfig = Static<typeof Introspection>
export type CacheConfig = Static<typeof Cache>
export type DpopConfig = Static<typeof Dpop>
export type RateLimitPolicyConfig = Static<typeof RateLimitPolicy>
export type RateLimitsConfig = Static<typeof RateLimits>
export type TracingConfig = Static<typeof Tracing>
export type DecisionConfig = Static<typeof Decision>
export type DpopModeConfig = Static<typeof DpopMode>
export type AuditConfig = Static<typeof Audit>
export type AuthorizationServerConfig = Static<typeof AuthorizationServer>
export type ClientConfig = Static<typeof Client>
export type UserConfig = Static<typeof User>
export type GrantType = (typeof GRANT_TYPES)[number]
export type JwsAlgorithm = (typeof JWS_ALGORITHMS)[number]
export type HttpMethod = (typeof HTTP_METHODS)[number]
export type { TSchema }
