/**
 * The gateway's own sections: `server`, `admin`, `upstreams`, `forward`, `cache`, `audit`, `log`, `tracing`,
 * `rate_limits`, `dpop` and `decision`. Issuers and routes have their own modules (issuers.ts, routes.ts).
 */
import { Type, type Static } from '@sinclair/typebox'
import { DPOP_ALGORITHMS } from '../constants.js'
import { Duration, HeaderName, HostPort, NonEmpty, Size, Strict, StringEnum } from './shared.js'

export const Server = Strict({
  listen: Type.Optional(HostPort),
  max_body_size: Type.Optional(Size),
  max_header_size: Type.Optional(Size),
  max_token_size: Type.Optional(Size),
  public_url: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL' })),
  realm: Type.Optional(Type.String({ pattern: '^[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]*$', 'x-message': 'must be printable ASCII without quotes or backslashes' })),
  tls: Type.Optional(Strict({
    cert_file: NonEmpty,
    key_file: NonEmpty,
    // RFC 8705: ask clients for a certificate (certificate-bound tokens, tls_client_auth); none is still accepted.
    client_certificates: Type.Optional(StringEnum(['off', 'request'] as const)),
    // The CAs a `tls_client_auth` client's certificate must chain to.
    client_ca_file: Type.Optional(NonEmpty),
  })),
  // HTTP/2 (RFC 9113) on the public listener: h2 by ALPN with TLS, h2c with prior knowledge in cleartext if asked.
  http2: Type.Optional(Strict({
    enabled: Type.Optional(Type.Boolean()),
    cleartext: Type.Optional(Type.Boolean()),
    max_concurrent_streams: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    idle_timeout: Type.Optional(Duration),
  })),
  shutdown_timeout: Type.Optional(Duration),
  // How long an idle HTTP/1.1 keep-alive connection stays open: longer than a load balancer's own idle timeout.
  keep_alive_timeout: Type.Optional(Duration),
  // http:// off loopback for issuer keys, discovery, introspection and the embedded issuer (lint.ts): an error without it.
  allow_insecure_http: Type.Optional(Type.Boolean()),
  body_buffer_size: Type.Optional(Size),
  body_timeout: Type.Optional(Duration),
  body_min_rate: Type.Optional(Size),
  body_streams_per_address: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
  // The bytes request bodies read into memory may hold in the process; past it a body is refused 503 (0b: no budget).
  body_memory: Type.Optional(Size),
  // Load shedding: requests waiting for their answer at once, past which new ones get 503 with Retry-After.
  admission: Type.Optional(Strict({
    max_in_flight: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    retry_after: Type.Optional(Duration),
  })),
  // Worker processes sharing the listeners (node:cluster); `auto` = the CPUs this process may use.
  workers: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 256 }), Type.Literal('auto')],
    { 'x-message': 'must be a number of workers from 1 to 256, or auto' })),
})

export const Admin = Strict({ listen: Type.Optional(HostPort) })

export const Upstream = Strict({
  url: Type.String({
    pattern: '^(https?://[^/?#]+/?|builtin:echo)$',
    'x-message': 'must be an http:// or https:// origin (scheme, host, optional port; no path) or builtin:echo',
  }),
  timeout: Type.Optional(Duration),
  ca_file: Type.Optional(NonEmpty),
  connections: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })),
  queue_timeout: Type.Optional(Duration),
  // The protocol spoken to the upstream: HTTP/2 by ALPN (https) or with prior knowledge (http, h2c).
  http2: Type.Optional(Type.Boolean()),
})

export const Forward = Strict({
  identity_headers: Type.Optional(Strict({
    subject: Type.Optional(HeaderName),
    client_id: Type.Optional(HeaderName),
    scopes: Type.Optional(HeaderName),
    issuer: Type.Optional(HeaderName),
  })),
  strip_authorization: Type.Optional(Type.Boolean()),
  trust_forwarded_headers: Type.Optional(Type.Boolean()),
  strip_headers: Type.Optional(Type.Array(HeaderName)),
  // RFC 8705: the subject of the certificate a certificate-bound token was checked against, under this name.
  client_certificate_header: Type.Optional(HeaderName),
  max_identity_header_size: Type.Optional(Size),
})

/** `tracing`: OpenTelemetry traces over OTLP/HTTP (src/tracing/). */
export const Tracing = Strict({
  enabled: Type.Boolean(),
  endpoint: Type.Optional(Type.String({ pattern: '^https?://', 'x-message': 'must be the http(s) URL of an OTLP/HTTP traces endpoint' })),
  headers: Type.Optional(Type.Record(Type.String({ pattern: '^[!#$%&\'*+.^_`|~0-9A-Za-z-]+$' }), Type.String())),
  sample_ratio: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  service_name: Type.Optional(NonEmpty),
  export_delay: Type.Optional(Duration),
  attributes: Type.Optional(Strict({ subject: Type.Optional(Type.Boolean()) })),
})

/** `rate_limits`: rate limit policies and where their counters are kept (src/ratelimit/). */
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
export const RateLimits = Strict({
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

/** `dpop`: DPoP proof checks (RFC 9449 §4.3), shared by the embedded server's token endpoint and the gateway (src/dpop/settings.ts). */
export const Dpop = Strict({
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

/** `decision`: the decision endpoint, for a proxy in front that forwards by itself (src/decision/). */
export const Decision = Strict({
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

export const Cache = Strict({
  max_entries: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
  jwt: Type.Optional(Type.Boolean()),
})

export const Audit = Strict({
  // `stdout`, a file path, or a list of both.
  output: Type.Optional(Type.Union([NonEmpty, Type.Array(NonEmpty, { minItems: 1, maxItems: 2 })])),
})

export const Log = Strict({
  level: Type.Optional(StringEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const)),
  buffer: Type.Optional(Size),
  flush_interval: Type.Optional(Duration),
})

export type UpstreamConfig = Static<typeof Upstream>
export type ForwardConfig = Static<typeof Forward>
export type CacheConfig = Static<typeof Cache>
export type DpopConfig = Static<typeof Dpop>
export type RateLimitPolicyConfig = Static<typeof RateLimitPolicy>
export type RateLimitsConfig = Static<typeof RateLimits>
export type TracingConfig = Static<typeof Tracing>
export type DecisionConfig = Static<typeof Decision>
export type AuditConfig = Static<typeof Audit>
