/**
 * Every Prometheus metric of Portcullis, in its own prom-client Registry (never the global one), served
 * on the admin listener only. Names are `portcullis_*` in base units (seconds, bytes); labels are bounded
 * by the config: route ids, upstream names, issuer identifiers, client_ids, grant types, outcomes and
 * reason codes — never a path, a token, a subject or anything a client can make up.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { registerProcessMetrics } from './process.js'
import { PlainCounter, PlainHistogram } from './plain.js'
import type { CacheStats, KeySetStats } from './stats.js'
import { collectCaches, collectKeySets, collectValidations } from './collectors.js'
import { INTROSPECTION_OUTCOMES, ValidationCounts, type IntrospectionRecorder, type ValidationMethod } from './validations.js'

export {
  UNKNOWN_ISSUER, ValidationCounts,
  type IntrospectionOutcome, type IntrospectionRecorder, type UnavailableReason, type ValidationMethod,
} from './validations.js'

/** What happened to a request on the proxy path (the `decision` label). */
export type Decision =
  | 'forwarded'       // the upstream answered (whatever its status)
  | 'allowed'         // the decision endpoint allowed it: 200 for the proxy in front to forward (`decision:`)
  | 'answered'        // the gateway answered it itself: a CORS preflight, an RFC 9728 metadata document
  | 'denied'          // no token, a bad token, a missing scope: 400/401/403 with a Bearer challenge
  | 'rejected'        // refused before authentication: no route, wrong method, a path trick, too large
  | 'limited'         // a rate limit policy refused it: 429 (`rate_limits`)
  | 'unavailable'     // a token could not be checked (issuer keys or introspection down): 503
  | 'upstream_error'  // the upstream refused, failed or was too slow: 502/504
  | 'overloaded'      // shed before any stage: too many requests waiting for an answer (`server.admission`), 503
  | 'error'           // a failure of ours: 500

/** Methods a route can name; anything else is counted as OTHER, so a client cannot add label values. */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'])

/** Request and upstream latencies: from 0.5 ms (a cache hit) to 30 s (an upstream timeout). */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** What the gateway reports on scrape (caches, key sets): read when Prometheus asks, never per request. */
export interface GatewayStats {
  cacheStats(): CacheStats[]
  keySetStats(): KeySetStats[]
  /** Bytes of request bodies read into memory now (`server.body_memory` counts them). */
  bodyMemoryBytes(): number
}

/** What a finished request's metrics read of it (the gateway's per-request exchange has it). */
export interface RequestDone {
  readonly route: string
  readonly decision: Decision
  /** The error code when refused, '' when forwarded. */
  readonly error: string
}

export class Metrics {
  readonly registry = new Registry()
  private stats: GatewayStats | undefined
  /** By method and issuer; kept across reloads, so the counters never go back. */
  private readonly validationCounts = new Map<string, ValidationCounts>()

  // Per request: plain numbers, rendered on scrape (plain.ts).
  readonly requests = new PlainCounter('portcullis_requests_total',
    'Requests on the proxy path, by route id, method, status code, decision, reason (the error code answered) and protocol (http1, h2).',
    ['route', 'method', 'status', 'decision', 'reason', 'protocol'], this.registry)
  readonly grpcCalls = new PlainCounter('portcullis_grpc_calls_total',
    'gRPC calls on the proxy path, by route id and the gRPC status they ended with (the upstream\'s, or the gateway\'s refusal).',
    ['route', 'grpc_status'], this.registry)
  readonly requestDuration = new PlainHistogram('portcullis_request_duration_seconds',
    'Time from the request\'s arrival to the end of the response, by route id.', ['route'], LATENCY_BUCKETS, this.registry)
  readonly authorizationDenials = new PlainCounter('portcullis_authorization_denials_total',
    'Requests with a valid token refused by a route\'s rules (403), by route id and the rule that failed: scopes.all, scopes.any, claims.all[N] or claims.any.',
    ['route', 'condition'], this.registry)
  readonly rateLimited = new PlainCounter('portcullis_rate_limited_total',
    'Requests refused with 429 by a rate limit policy, by route id and policy name; never by key.',
    ['route', 'policy'], this.registry)
  readonly rateLimitStoreErrors = new PlainCounter('portcullis_rate_limit_store_errors_total',
    'Rate limit checks the shared store (Redis, or the primary under server.workers) could not answer, by policy and what the policy did: open (let through) or closed (503).',
    ['policy', 'outcome'], this.registry)
  readonly upstreamDuration = new PlainHistogram('portcullis_upstream_duration_seconds',
    'Time from sending a request upstream to the end of its response, by upstream name and outcome.',
    ['upstream', 'outcome'], LATENCY_BUCKETS, this.registry)
  readonly tokenValidations = new Counter({
    name: 'portcullis_token_validations_total',
    help: 'Tokens checked on the proxy path (cache hits included), by issuer, method (jwt, introspection, embedded), result (valid, invalid, unavailable) and reason.',
    labelNames: ['issuer', 'method', 'result', 'reason'] as const,
    registers: [this.registry],
    collect: (): void => collectValidations(this.tokenValidations, this.validationCounts.values()),
  })
  readonly jwksFetches = new Counter({
    name: 'portcullis_jwks_fetches_total',
    help: 'JWKS documents fetched, by issuer and result (success, failure).',
    labelNames: ['issuer', 'result'] as const,
    registers: [this.registry],
    collect: (): void => collectKeySets(this, this.stats?.keySetStats() ?? []),
  })
  readonly jwksAge = new Gauge({
    name: 'portcullis_jwks_age_seconds',
    help: 'Age of the key set in use, by issuer (absent before its first successful fetch).',
    labelNames: ['issuer'] as const,
    registers: [this.registry],
    // Several workers (server.workers): one scrape shows the oldest.
    aggregator: 'max',
  })
  readonly jwksKeys = new Gauge({
    name: 'portcullis_jwks_keys',
    help: 'Keys in the key set in use, by issuer.',
    labelNames: ['issuer'] as const,
    registers: [this.registry],
    aggregator: 'max',
  })
  readonly introspections = new Counter({
    name: 'portcullis_introspection_requests_total',
    help: 'Calls to RFC 7662 introspection endpoints, by issuer and outcome (active, inactive, error, timeout).',
    labelNames: ['issuer', 'outcome'] as const,
    registers: [this.registry],
  })
  readonly introspectionDuration = new Histogram({
    name: 'portcullis_introspection_duration_seconds',
    help: 'Latency of RFC 7662 introspection calls, by issuer.',
    labelNames: ['issuer'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  })
  readonly cacheLookups = new Counter({
    name: 'portcullis_cache_lookups_total',
    help: 'Token cache lookups, by cache (jwt, introspection) and result (hit, miss).',
    labelNames: ['cache', 'result'] as const,
    registers: [this.registry],
    collect: (): void => collectCaches(this, this.stats?.cacheStats() ?? []),
  })
  readonly cacheEvictions = new Counter({
    name: 'portcullis_cache_evictions_total',
    help: 'Entries pushed out of a token cache by its size bound, by cache.',
    labelNames: ['cache'] as const,
    registers: [this.registry],
  })
  readonly cacheEntries = new Gauge({
    name: 'portcullis_cache_entries',
    help: 'Entries in a token cache now, by cache.',
    labelNames: ['cache'] as const,
    registers: [this.registry],
  })
  readonly cacheCapacity = new Gauge({
    name: 'portcullis_cache_capacity_entries',
    help: 'The bound of a token cache (cache.max_entries), by cache.',
    labelNames: ['cache'] as const,
    registers: [this.registry],
  })
  readonly tokensIssued = new Counter({
    name: 'portcullis_tokens_issued_total',
    help: 'Token responses of the embedded authorization server, by grant type and client_id.',
    labelNames: ['grant_type', 'client_id'] as const,
    registers: [this.registry],
  })
  readonly tokenErrors = new Counter({
    name: 'portcullis_token_endpoint_errors_total',
    help: 'Error responses of the token endpoint, by OAuth error code.',
    labelNames: ['error'] as const,
    registers: [this.registry],
  })
  readonly configReloads = new Counter({
    name: 'portcullis_config_reloads_total',
    help: 'Configuration reloads, by result (success, failure).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  })
  readonly configInfo = new Gauge({
    name: 'portcullis_config_info',
    help: 'Always 1; the SHA-256 of the configuration file in use, and when it was loaded.',
    labelNames: ['sha256'] as const,
    registers: [this.registry],
    // Workers on one file: one series of 1 (two, each 1, while a reload reaches them).
    aggregator: 'max',
  })
  readonly bodyMemory = new Gauge({
    name: 'portcullis_request_body_memory_bytes',
    help: 'Bytes of request bodies read into memory now, which server.body_memory bounds.',
    registers: [this.registry],
    collect: (): void => { this.bodyMemory.set(this.stats?.bodyMemoryBytes() ?? 0) },
  })
  readonly configLoaded = new Gauge({
    name: 'portcullis_config_last_reload_success_timestamp_seconds',
    help: 'When the configuration in use was loaded.',
    registers: [this.registry],
    aggregator: 'max',
  })


  /** @param options.worker the worker's id under `server.workers`: its process metrics carry it as a label. */
  constructor(options: { defaultMetrics?: boolean; worker?: number } = {}) {
    // Process metrics (CPU, memory, event loop lag, GC), prefixed like ours; per worker, never summed.
    if (options.defaultMetrics ?? true) {
      registerProcessMetrics(this.registry, options.worker)
    }
    this.configReloads.inc({ result: 'success' }, 0)
    this.configReloads.inc({ result: 'failure' }, 0)
  }

  /** The live gateway's caches and key sets, read on every scrape. Replaced on reload. */
  bindGateway(stats: GatewayStats): void {
    this.stats = stats
  }

  /**
   * One request on the proxy path, at the end of its response: `done.route` ('' before a route matched: `(none)`),
   * `done.decision` and `done.error` (its code, '' when forwarded).
   */
  observeRequest(done: RequestDone, method: string, status: number, seconds: number, protocol: 'http1' | 'h2' = 'http1'): void {
    const route = done.route || '(none)'
    // Every label value is bounded (route ids, methods, statuses, decisions, reasons, two protocols).
    this.requests.labels(route, METHODS.has(method) ? method : 'OTHER', String(status), done.decision, done.error, protocol).value++
    this.requestDuration.observe(seconds, route)
  }

  /** A gRPC call that ended (its status a number 0–16, or `unknown` when none came: the call was cut). */
  observeGrpcCall(route: string, grpcStatus: number | undefined): void {
    const status = grpcStatus !== undefined && Number.isInteger(grpcStatus) && grpcStatus >= 0 && grpcStatus <= 16 ? String(grpcStatus) : 'unknown'
    this.grpcCalls.labels(route || '(none)', status).value++
  }

  /** A request refused by a rate limit (labels bounded by the config). */
  observeRateLimited(route: string, policy: string): void {
    this.rateLimited.labels(route, policy).value++
  }

  /** A valid token refused by a route's scopes or claim conditions (labels bounded by the config). */
  observeDenial(route: string, condition: string): void {
    this.authorizationDenials.labels(route, condition).value++
  }

  /** One request sent upstream: its time to the end of the response, or to its failure. */
  observeUpstream(upstream: string, outcome: 'response' | 'failure', seconds: number): void {
    this.upstreamDuration.observe(seconds, upstream, outcome)
  }

  /**
   * Where the validations of one issuer by one method are counted: the same object for the life of the
   * process, so an authenticator rebuilt by a reload counts on where the last one stopped.
   */
  validations(issuer: string, method: ValidationMethod): ValidationCounts {
    const key = `${method} ${issuer}`
    let counts = this.validationCounts.get(key)
    if (!counts) {
      counts = new ValidationCounts(issuer, method)
      this.validationCounts.set(key, counts)
    }
    return counts
  }

  /** Counts the calls to one issuer's introspection endpoint (every outcome starts at 0, so rate() sees it). */
  introspectionRecorder(issuer: string): IntrospectionRecorder {
    const calls = new Map(INTROSPECTION_OUTCOMES.map((outcome) => {
      this.introspections.inc({ issuer, outcome }, 0)
      return [outcome, this.introspections.labels({ issuer, outcome })] as const
    }))
    const duration = this.introspectionDuration.labels({ issuer })
    return (outcome, seconds) => {
      calls.get(outcome)!.inc()
      duration.observe(seconds)
    }
  }

  /** The configuration now in use, by the hash of its file. */
  setConfig(sha256: string, loadedAtMs: number): void {
    this.configInfo.reset()
    this.configInfo.set({ sha256 }, 1)
    this.configLoaded.set(loadedAtMs / 1000)
  }
}
