/**
 * The part of the gateway a configuration reload replaces (issue: operations, hot reload): the route
 * table, the issuers with their caches, the upstream pools and the forwarding policy. A new runtime is
 * built beside the one in use, from the new config, reusing what did not change (an unchanged `issuers`
 * and `cache` keeps the authenticator and its warm caches; an unchanged upstream keeps its pool). The
 * pipeline swaps it in with one assignment; requests in flight finish on the runtime they started with,
 * and what the new one no longer uses is closed once the last of them ends.
 */
import type { FastifyBaseLogger } from 'fastify'
import { Authenticator, type EmbeddedIssuer, type RevocationCheck } from '../authn/authenticator.js'
import type { DpopConfig, GatewayConfig } from '../config/schema.js'
import { parseDuration, parseSize } from '../config/units.js'
import type { BodyPolicy } from '../forward/body-watch.js'
import { BodyMemory, DEFAULT_BODY_MEMORY } from '../forward/body-memory.js'
import { DEFAULT_STREAMS_PER_ADDRESS } from '../forward/pool-size.js'
import { createUpstream, type Upstream } from '../forward/proxy.js'
import { addedHeaderNames, createHeaderPolicy, type HeaderPolicy } from '../forward/header-policy.js'
import { enterKnownHeaderNames } from '../forward/known-names.js'
import type { Metrics } from '../metrics/metrics.js'
import { compileRuleSteps, ruleContext, type ReusableRules } from '../rules/compile.js'
import { runAtOnce, runInSlices, type Steps } from '../common/slices.js'
import { compileClaimPlan, type ClaimPlan } from '../rules/claim-plan.js'
import { compileResources, type CompiledResource } from '../resources/metadata.js'
import type { CompiledRule } from '../rules/compile.js'
import { RouteIndex } from '../rules/route-index.js'
import { compileCorsRuntime, type CorsRuntime } from '../cors/policy.js'
import { DpopGate } from '../dpop/gateway.js'
import { RateLimiter } from '../ratelimit/limiter.js'
import { RedisBuckets } from '../ratelimit/redis.js'
import type { SharedOnce } from '../dpop/replay.js'
import type { SharedBuckets } from '../ratelimit/shared.js'
import type { DpopSettings } from '../dpop/settings.js'
import { compileDecision, type CompiledDecision } from '../decision/settings.js'
import type { RequestLog } from './log-output.js'
import { admissionPolicy, WaitingRoom, type AdmissionPolicy } from './admission.js'

export interface GatewayRuntime {
  readonly rules: readonly CompiledRule[]
  /** The rules' index: what the match stage asks (rules/route-index.ts). */
  readonly routes: RouteIndex
  /** RFC 9728 metadata documents by path; null when no resource is configured. */
  readonly resourceMetadata: ReadonlyMap<string, CompiledResource> | null
  /** CORS; null when no `cors` is configured anywhere: then the pipeline does nothing about it. */
  readonly cors: CorsRuntime | null
  readonly authenticator: Authenticator
  readonly upstreams: ReadonlyMap<string, Upstream>
  readonly headerPolicy: HeaderPolicy
  /** The same without `Authorization`: for routes that strip it although `forward` does not (`mcp` routes). */
  readonly tokenlessHeaderPolicy: HeaderPolicy
  readonly realm: string
  /** DPoP proofs: always there (the scheme is accepted by default); its replay cache outlives reloads. */
  readonly dpop: DpopGate
  /** The decision endpoint's trust and cache settings; null without `decision:`. */
  readonly decision: CompiledDecision | null
  /** Rate limits; null when no route has any. */
  readonly rateLimiter: RateLimiter | null
  readonly maxTokenSize: number
  readonly bodyPolicy: BodyPolicy
  readonly log: FastifyBaseLogger
  /** The request line of every request, at `info` (src/server/log-output.ts). */
  readonly requestLog: RequestLog
  readonly metrics: Metrics
  /** The clock (ms since the epoch), for what a stage dates: a decision's cache lifetime. */
  readonly now: () => number
  /** `server.admission`: the limit on requests waiting for an answer, and the 503 past it. */
  readonly admission: AdmissionPolicy
  /** The requests waiting for an answer, in the whole process: the same room for every runtime a reload builds. */
  readonly waiting: WaitingRoom
  /** Requests being served on this runtime now; see {@link retireWhenIdle}. */
  inflight: number
  /** Set when a newer runtime has replaced this one: it closes what it alone holds once `inflight` is 0. */
  onIdle?: (() => void) | undefined
  /** The config sections it was built from, to know what a reload may reuse. */
  readonly source: {
    readonly authn: string
    readonly upstreams: ReadonlyMap<string, string>
    /** Its rules by the routes they were compiled from, and everything else they depend on (rules/compile.ts, ruleContext). */
    readonly rules: ReusableRules
    readonly ruleContext: string
  }
}

export interface RuntimeDependencies {
  readonly log: FastifyBaseLogger
  readonly requestLog: RequestLog
  readonly metrics: Metrics
  readonly now: () => number
  readonly embedded?: EmbeddedIssuer | undefined
  readonly isRevoked?: RevocationCheck | undefined
  /** The store several instances share (Redis), for single use of DPoP proofs across them. */
  readonly sharedOnce?: SharedOnce | undefined
  /** Under `server.workers`: the primary, which counts the rate limits of every worker (memory store). */
  readonly sharedRates?: SharedBuckets | undefined
  /** The embedded server's DPoP settings and the `dpop:` they came from (one nonce secret for /token and the API). */
  readonly dpop?: { readonly config: DpopConfig | undefined; readonly settings: DpopSettings } | undefined
}

/** The authenticator depends on these only (the claims it keeps come from the routes too). */
function authnSource(config: GatewayConfig, plan: ClaimPlan): string {
  return JSON.stringify({ issuers: config.issuers ?? [], cache: config.cache ?? {}, kept: plan.kept, insecure: config.server?.allow_insecure_http === true })
}

/** Builds a runtime from `config`, taking from `previous` what is unchanged. */
export function buildRuntime(config: GatewayConfig, deps: RuntimeDependencies, previous?: GatewayRuntime): GatewayRuntime {
  return runAtOnce(runtimeSteps(config, deps, previous))
}

/**
 * The same for a hot reload: built a slice at a time (common/slices.ts: about 2 ms of the route table's compile,
 * then each table made from it), the requests in flight being served between slices.
 */
export function buildRuntimeInSlices(config: GatewayConfig, deps: RuntimeDependencies, previous: GatewayRuntime): Promise<GatewayRuntime> {
  return runInSlices(runtimeSteps(config, deps, previous))
}

function* runtimeSteps(config: GatewayConfig, deps: RuntimeDependencies, previous: GatewayRuntime | undefined): Steps<GatewayRuntime> {
  // A config is served only once loaded (check/load.ts), whose lint has found every tie: not looked for again here.
  // A route a reload did not change (the same object: load-off-thread.ts) keeps its rule when nothing else the rules
  // depend on changed: a reload then builds only what it changed, and the young generation copies only that.
  const context = ruleContext(config)
  const reuse = previous?.source.ruleContext === context ? previous.source.rules : undefined
  const { rules, byRoute, kept } = yield* compileRuleSteps(config, { checkTies: false, reuse })
  if (previous) deps.log.debug({ routes: rules.length, kept }, 'route table rebuilt; rules of unchanged routes kept')
  const plan = compileClaimPlan(config, rules)
  yield
  const authn = authnSource(config, plan)
  const authenticator = previous && previous.source.authn === authn
    ? previous.authenticator
    : new Authenticator({
      issuers: config.issuers ?? [],
      ...(deps.embedded && { embedded: deps.embedded }),
      ...(config.cache && { cache: config.cache }),
      log: deps.log,
      now: deps.now,
      metrics: deps.metrics,
      ...(deps.isRevoked && { isRevoked: deps.isRevoked }),
      keptClaims: plan.kept,
      allowInsecureHttp: config.server?.allow_insecure_http === true,
    })
  const upstreamSources = new Map(Object.entries(config.upstreams).map(([name, upstream]) => [name, JSON.stringify(upstream)]))
  const upstreams = new Map<string, Upstream>()
  for (const [name, upstream] of Object.entries(config.upstreams)) {
    const reused = previous?.source.upstreams.get(name) === upstreamSources.get(name) ? previous?.upstreams.get(name) : undefined
    upstreams.set(name, reused ?? createUpstream(name, upstream))
  }
  if (authenticator !== previous?.authenticator) authenticator.prefetch()
  const { byMetadataPath } = compileResources(config)
  const dpop = new DpopGate({ config, metrics: deps.metrics, now: deps.now, shared: deps.sharedOnce, previous: previous?.dpop, initial: deps.dpop })
  const rateLimiter = rules.some((rule) => rule.rateLimits !== null) ? new RateLimiter({
    policies: new Set(rules.flatMap((rule) => rule.rateLimits ?? [])),
    config: config.rate_limits,
    metrics: deps.metrics,
    trustForwarded: config.forward?.trust_forwarded_headers ?? false,
    previous: previous?.rateLimiter ?? undefined,
    shared: deps.sharedRates,
    openRedis: (timeoutMs) => {
      const store = config.rate_limits?.store
      const shared = config.authorization_server?.store
      return new RedisBuckets(store?.url ?? shared!.url!, store?.prefix ?? shared?.prefix ?? '{portcullis}:', timeoutMs,
        (error) => deps.log.warn({ err: error }, 'rate limit store error'))
    },
    now: deps.now,
  }) : null
  const headerPolicy = createHeaderPolicy(config.forward, Boolean(config.server?.tls), { names: plan.headerNames, byIssuer: plan.byIssuer },
    dpop.settings.forwardProof ? [] : ['dpop'])
  enterKnownHeaderNames(addedHeaderNames(headerPolicy, plan.headerNames))
  yield
  const routes = yield* RouteIndex.steps(rules, previous?.routes)
  yield
  const cors = compileCorsRuntime(config, rules)
  return {
    rules,
    routes,
    resourceMetadata: byMetadataPath.size > 0 ? byMetadataPath : null,
    cors,
    authenticator,
    upstreams,
    headerPolicy,
    tokenlessHeaderPolicy: { ...headerPolicy, removed: new Set([...headerPolicy.removed, 'authorization']) },
    realm: config.server?.realm ?? 'portcullis',
    dpop,
    decision: compileDecision(config),
    rateLimiter,
    maxTokenSize: parseSize(config.server?.max_token_size ?? '8kb'),
    bodyPolicy: {
      bufferSize: parseSize(config.server?.body_buffer_size ?? '64kb'),
      idleMs: parseDuration(config.server?.body_timeout ?? '10s'),
      minRate: parseSize(config.server?.body_min_rate ?? '1kb'),
      streamsPerAddress: config.server?.body_streams_per_address ?? DEFAULT_STREAMS_PER_ADDRESS,
      trustForwarded: config.forward?.trust_forwarded_headers ?? false,
      memory: bodyMemory(config, previous),
    },
    log: deps.log,
    requestLog: deps.requestLog,
    metrics: deps.metrics,
    now: deps.now,
    admission: admissionPolicy(config),
    waiting: previous?.waiting ?? new WaitingRoom(),
    inflight: 0,
    source: { authn, upstreams: upstreamSources, rules: byRoute, ruleContext: context },
  }
}

/** `server.body_memory`, default 256 MB: one count for the process, kept across reloads with the new limit. */
function bodyMemory(config: GatewayConfig, previous: GatewayRuntime | undefined): BodyMemory {
  const limit = parseSize(config.server?.body_memory ?? DEFAULT_BODY_MEMORY)
  const memory = previous?.bodyPolicy.memory ?? new BodyMemory(limit)
  memory.limit = limit
  return memory
}

/** What `retired` holds that `current` does not share: closed when the last request on `retired` ends. */
export function retireWhenIdle(retired: GatewayRuntime, current: GatewayRuntime): void {
  const close = () => {
    retired.onIdle = undefined
    const pools = [...retired.upstreams.values()].filter((upstream) => ![...current.upstreams.values()].includes(upstream))
    void Promise.all([
      ...pools.map((upstream) => upstream.pool?.close()),
      retired.authenticator !== current.authenticator ? retired.authenticator.close() : undefined,
      retired.rateLimiter !== null && (current.rateLimiter === null || !retired.rateLimiter.sharesRedisWith(current.rateLimiter))
        ? retired.rateLimiter.close() : undefined,
    ]).catch((error: unknown) => retired.log.warn({ err: error }, 'closing a replaced runtime failed'))
  }
  if (retired.inflight === 0) close()
  else retired.onIdle = close
}

/** Closes everything a runtime holds (shutdown). */
export async function closeRuntime(runtime: GatewayRuntime): Promise<void> {
  await Promise.all([...[...runtime.upstreams.values()].map((upstream) => upstream.pool?.close()), runtime.authenticator.close(),
    runtime.rateLimiter?.close()])
}
