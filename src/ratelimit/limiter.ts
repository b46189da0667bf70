/**
 * Rate limits at the gateway: after authentication (a forged token never reaches this, so it cannot
 * spend another client's budget) and before forwarding, each of the route's policies takes one request from
 * the bucket of the request's key, all or nothing: every policy is checked, and the takes are stored only if
 * all admit, so a request refused by one policy spends nothing of the others. The first that refuses answers 429
 * with `Retry-After` (the longest wait of those that refuse).
 * Admitted responses carry the RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-10)
 * unless the route opts out.
 *
 * In memory a check is synchronous (the cache-hit path stays promise-free); on Redis it is one round trip (one
 * script for all the policies); under `server.workers` with the memory store the primary counts (shared.ts), one
 * IPC round trip. The buckets outlive reloads: a policy whose settings are unchanged keeps its state.
 */
import type { IncomingMessage } from 'node:http'
import { isIPv6 } from 'node:net'
import { createHash } from 'node:crypto'
import type { Principal } from '../common/principal.js'
import { readClaim } from '../claims/path.js'
import type { RateLimitsConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { RateLimited, TemporarilyUnavailable } from '../errors/oauth-errors.js'
import type { Metrics } from '../metrics/metrics.js'
import type { GcraOutcome } from './gcra.js'
import { MemoryBuckets, takeAll } from './memory.js'
import type { Budget, CompiledPolicy } from './policy.js'
import type { RedisBuckets } from './redis.js'
import type { SharedBuckets } from './shared.js'

/** What an admitted request's response carries: `[name, value, …]`, or null without fields. */
export type RateLimitFields = string[] | null

/** What a rate limit reads of a request on its way (the gateway's per-request exchange has it all). */
export interface CountedRequest {
  readonly rule: { readonly id: string; readonly rateLimits: readonly CompiledPolicy[] | null }
  readonly req: IncomingMessage
  /** Undefined for a request without a token (counted under its address). */
  readonly principal: Principal | undefined
  /**
   * A proxy in front described the request (the decision endpoint): the client's address is the last
   * `X-Forwarded-For` entry. Otherwise that is as `forward.trust_forwarded_headers` says.
   */
  readonly described?: boolean | undefined
}

/** A policy taken from, with the budget it was taken under and what the take said. */
type Settled = [CompiledPolicy, Budget, GcraOutcome]

/** Each of a request's policies with the key value it counts the request under and the budget for that value. */
type Resolved = ReadonlyArray<readonly [CompiledPolicy, string, Budget]>

export interface LimiterOptions {
  /** The policies the routes use (compiled with them: rules/compile.ts), each once. */
  readonly policies: Iterable<CompiledPolicy>
  readonly config: RateLimitsConfig | undefined
  readonly metrics: Metrics
  readonly trustForwarded: boolean
  /** The limiter of the configuration before a reload: the buckets of unchanged policies carry over. */
  readonly previous?: RateLimiter | undefined
  /** Opens the Redis store (url, prefix): only called when `store.type` is redis. */
  readonly openRedis?: ((timeoutMs: number) => RedisBuckets) | undefined
  /** Under `server.workers` with the memory store: the primary, which counts for every worker. */
  readonly shared?: SharedBuckets | undefined
  readonly now?: () => number
}

/** Key values longer than this are kept as their hash (a header can be 8 KB; a map key need not be). */
const MAX_RAW_KEY = 128

/**
 * The client's address: the peer, or (behind a trusted load balancer, `forward.trust_forwarded_headers`) the
 * last `X-Forwarded-For` entry, the address the balancer saw. IPv6 addresses count per /64: one host usually
 * has a whole /64 to rotate through.
 */
export function clientAddress(req: IncomingMessage, trustForwarded: boolean): string {
  let address = req.socket.remoteAddress ?? ''
  if (trustForwarded) {
    const forwarded = req.headers['x-forwarded-for']
    if (typeof forwarded === 'string') {
      const last = forwarded.slice(forwarded.lastIndexOf(',') + 1).trim()
      if (last !== '') address = last
    }
  }
  if (address.startsWith('::ffff:')) return address.slice(7)
  if (!isIPv6(address)) return address
  const groups = expandIPv6(address)
  return groups === undefined ? address : `${groups.slice(0, 4).join(':')}::/64`
}

function expandIPv6(address: string): string[] | undefined {
  const [head, tail] = address.split('::') as [string, string | undefined]
  const left = head === '' ? [] : head.split(':')
  const right = tail === undefined || tail === '' ? [] : tail.split(':')
  const missing = 8 - left.length - right.length
  if (tail === undefined ? left.length !== 8 : missing < 1) return undefined
  return [...left, ...Array<string>(tail === undefined ? 0 : missing).fill('0'), ...right].map((group) => group.toLowerCase().replace(/^0+(?=.)/, ''))
}

export class RateLimiter {
  private readonly memory = new Map<string, MemoryBuckets>()
  private readonly fingerprints = new Map<string, string>()
  readonly redis: RedisBuckets | null
  private readonly storeKey: string
  private readonly now: () => number
  /** `rate_limits.store.max_keys`: the keys one policy keeps in memory. */
  private readonly maxKeys: number
  /** Under `server.workers`: each policy's buckets at the primary, by name and a hash of its settings (short: sent with every take). */
  private readonly sharedBuckets = new Map<string, string>()

  constructor(private readonly options: LimiterOptions) {
    const { config, previous } = options
    this.now = options.now ?? Date.now
    const store = config?.store
    this.maxKeys = store?.max_keys ?? 100_000
    this.storeKey = JSON.stringify(store ?? {})
    const sameStore = previous !== undefined && previous.storeKey === this.storeKey
    this.redis = store?.type === 'redis'
      ? (sameStore && previous.redis !== null ? previous.redis : options.openRedis!(parseDuration(store.timeout ?? '250ms')))
      : null
    for (const policy of options.policies) {
      this.fingerprints.set(policy.name, policy.fingerprint)
      this.sharedBuckets.set(policy.name, `${policy.name}:${createHash('sha256').update(policy.fingerprint).digest('base64url').slice(0, 16)}`)
      const kept = sameStore && previous.fingerprints.get(policy.name) === policy.fingerprint ? previous.memory.get(policy.name) : undefined
      if (this.redis === null && options.shared === undefined) this.memory.set(policy.name, kept ?? new MemoryBuckets(this.maxKeys))
    }
  }

  /** Whether a reload must close this limiter's Redis connection (the next one opened its own). */
  sharesRedisWith(other: RateLimiter): boolean {
    return this.redis !== null && this.redis === other.redis
  }

  /** The value `policy` counts this request under; undefined when the key is absent. */
  private keyValue(policy: CompiledPolicy, req: IncomingMessage, principal: Principal | undefined, forwarded: boolean): string | undefined {
    const key = policy.key
    let value: unknown
    switch (key.kind) {
      case 'client_id': value = principal?.clientId; break
      case 'sub': value = principal?.subject; break
      case 'address': return clientAddress(req, forwarded)
      case 'claim': value = principal === undefined ? undefined : readClaim(principal.claims, key.path); break
      case 'header': value = req.headers[key.name]; break
    }
    if (typeof value === 'number' && Number.isFinite(value)) value = String(value)
    if (typeof value !== 'string' || value === '') return undefined
    return value.length > MAX_RAW_KEY ? `#${createHash('sha256').update(value).digest('base64url')}` : value
  }

  /**
   * Takes one request from each of the route's policies for this request, all or nothing; throws RateLimited (429)
   * or, for a closed policy whose store failed, TemporarilyUnavailable (503). Returns the fields for the response.
   * `forwarded`: the client's address is the last `X-Forwarded-For` entry (a trusted balancer, or the decision
   * endpoint's proxy).
   */
  check(request: CountedRequest, headers: boolean): RateLimitFields | Promise<RateLimitFields> {
    // Every key first: a policy that refuses a request without its key spends nothing of the others.
    const resolved: Resolved = request.rule.rateLimits!.map((policy) => [policy, ...this.resolve(policy, request)] as const)
    if (this.redis !== null || this.options.shared !== undefined) return this.checkElsewhere(request.rule.id, resolved, headers)
    const now = this.now()
    const outcomes = takeAll(resolved.map(([policy, key, budget]) => ({ bucket: this.memory.get(policy.name)!, key, parameters: budget.parameters })), now)
    return this.settle(request.rule.id, resolved, outcomes, headers)
  }

  /** Redis, or the primary under `server.workers`: one round trip for all the policies. */
  private async checkElsewhere(route: string, resolved: Resolved, headers: boolean): Promise<RateLimitFields> {
    let outcomes: GcraOutcome[]
    try {
      outcomes = this.redis !== null
        ? await this.redis.takeAll(resolved.map(([policy, key, budget]) => ({ policy: policy.name, key, parameters: budget.parameters })))
        : await this.options.shared!.takeAll(resolved.map(([policy, key, budget]) => ({
          bucket: this.sharedBuckets.get(policy.name)!, key, parameters: budget.parameters, maxKeys: this.maxKeys,
        })))
    } catch (error) {
      // `on_store_failure`: the open policies are skipped, a closed one answers 503.
      for (const [policy] of resolved) this.options.metrics.rateLimitStoreErrors.labels(policy.name, policy.failOpen ? 'open' : 'closed').value++
      const closed = resolved.find(([policy]) => !policy.failOpen)
      if (closed !== undefined) throw new TemporarilyUnavailable(`rate limit store unavailable (${closed[0].name})`, 1, error)
      return null
    }
    return this.settle(route, resolved, outcomes, headers)
  }

  /** The key value and budget of `policy` for this request (an override's, if the value has one). */
  private resolve(policy: CompiledPolicy, request: CountedRequest): [string, Budget] {
    const { req, principal } = request
    const forwarded = request.described === true || this.options.trustForwarded
    let value = this.keyValue(policy, req, principal, forwarded)
    if (value === undefined) {
      if (policy.fallback === 'refuse') {
        this.options.metrics.observeRateLimited(request.rule.id, policy.name)
        throw new RateLimited(policy.name, Math.ceil(policy.windowSeconds), null, `${policy.name}: no ${policy.key.kind} to count the request under`)
      }
      value = `@${clientAddress(req, forwarded)}`
    }
    return [value, policy.overrides?.get(value) ?? policy.budget]
  }

  /** Admitted: the response's fields. Refused: 429 naming the first policy that refused, after the longest wait. */
  private settle(route: string, resolved: Resolved, outcomes: readonly GcraOutcome[], headers: boolean): RateLimitFields {
    const results: Settled[] = resolved.map(([policy, , budget], i) => [policy, budget, outcomes[i]!])
    const refused = results.filter(([, , outcome]) => !outcome.allowed)
    if (refused.length === 0) return headers ? fields(results) : null
    const [policy, budget] = refused[0]!
    this.options.metrics.observeRateLimited(route, policy.name)
    const retryAfterMs = Math.max(...refused.map(([, , outcome]) => outcome.retryAfterMs))
    throw new RateLimited(policy.name, Math.max(1, Math.ceil(retryAfterMs / 1000)), headers ? fields(results) : null,
      `${policy.name}: limit ${budget.limit} per ${policy.windowSeconds}s reached`)
  }

  async close(): Promise<void> {
    await this.redis?.close()
  }
}

/** RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10 §4, §5): one item per policy applied. */
function fields(results: readonly Settled[]): string[] {
  let policy = ''
  let state = ''
  for (const [compiled, budget, outcome] of results) {
    policy += (policy === '' ? '' : ', ') + budget.policyField
    state += `${state === '' ? '' : ', '}"${compiled.name}";r=${outcome.remaining};t=${Math.ceil(outcome.resetMs / 1000)}`
  }
  return ['ratelimit-policy', policy, 'ratelimit', state]
}
