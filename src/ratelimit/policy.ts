/**
 * `rate_limits:` compiled at load: named policies (a limit per window with a burst, a key, overrides
 * per key value, what a store failure does), the ones every route gets by default, and each route's own. The
 * key is read after authentication, from what the gateway verified: the token's client or subject, a claim,
 * or the client's address; a header only where the config says so (a header is whatever the client sends).
 */
import type { GatewayConfig, RateLimitPolicyConfig } from '../config/schema.js'
import { didYouMean } from '../config/suggest.js'
import { parseDuration } from '../config/units.js'
import { ClaimPathError, parseClaimPath, type ClaimPath } from '../claims/path.js'
import { gcraParameters, type GcraParameters } from './gcra.js'

export type KeySource =
  | { readonly kind: 'client_id' | 'sub' | 'address' }
  | { readonly kind: 'claim'; readonly path: ClaimPath }
  | { readonly kind: 'header'; readonly name: string }

export interface Budget {
  readonly limit: number
  readonly burst: number
  readonly parameters: GcraParameters
  /** The `RateLimit-Policy` item of this budget (draft-ietf-httpapi-ratelimit-headers-10 §5). */
  readonly policyField: string
}

export interface CompiledPolicy {
  readonly name: string
  readonly windowSeconds: number
  readonly key: KeySource
  /** The key is absent (no token on an `auth: optional` route, no such claim or header): the address, or 429. */
  readonly fallback: 'address' | 'refuse'
  readonly budget: Budget
  /** Per key value: more (or less) than the policy's budget. Null when none. */
  readonly overrides: ReadonlyMap<string, Budget> | null
  /** The shared store cannot answer: let the request through (`open`) or refuse it with 503 (`closed`). */
  readonly failOpen: boolean
  /** What the state of this policy depends on: a reload that changes it starts the policy's buckets afresh. */
  readonly fingerprint: string
}

export interface RateLimitProblem {
  path: Array<string | number>
  message: string
}

function budgetOf(name: string, limit: number, burst: number | undefined, windowMs: number): Budget {
  const size = burst ?? limit
  return {
    limit, burst: size, parameters: gcraParameters(limit, windowMs, size),
    policyField: `"${name}";q=${size};w=${Math.max(1, Math.round(windowMs / 1000))}`,
  }
}

function keyOf(text: string, at: Array<string | number>, problems: RateLimitProblem[]): KeySource {
  if (text === 'client_id' || text === 'sub' || text === 'address') return { kind: text }
  if (text.startsWith('claim:')) {
    try {
      return { kind: 'claim', path: parseClaimPath(text.slice(6)) }
    } catch (error) {
      problems.push({ path: at, message: `claim path ${error instanceof ClaimPathError ? error.message : 'is invalid'}` })
      return { kind: 'address' }
    }
  }
  return { kind: 'header', name: text.slice(7).toLowerCase() }
}

function compilePolicy(name: string, config: RateLimitPolicyConfig, problems: RateLimitProblem[]): CompiledPolicy {
  const at = ['rate_limits', 'policies', name]
  const windowMs = parseDuration(config.window)
  if (windowMs < 1000) problems.push({ path: [...at, 'window'], message: 'must be at least 1s' })
  if (config.burst !== undefined && config.burst < 1) problems.push({ path: [...at, 'burst'], message: 'must be at least 1' })
  const overrides = config.overrides === undefined ? null
    : new Map(Object.entries(config.overrides).map(([value, amount]) => [value, budgetOf(name, amount.limit, amount.burst, windowMs)]))
  return {
    name,
    windowSeconds: windowMs / 1000,
    key: keyOf(config.key, [...at, 'key'], problems),
    fallback: config.fallback ?? 'address',
    budget: budgetOf(name, config.limit, config.burst, windowMs),
    overrides,
    failOpen: (config.on_store_failure ?? 'closed') === 'open',
    fingerprint: JSON.stringify(config),
  }
}

export interface CompiledRateLimits {
  readonly policies: ReadonlyMap<string, CompiledPolicy>
  /** Each route's policies by route id (its own `rate_limits`, else the default ones); absent: none. */
  readonly byRoute: ReadonlyMap<string, readonly CompiledPolicy[]>
  /** The claims policies read (kept on principals: claims/plan.ts). */
  readonly claimPaths: readonly ClaimPath[]
}

export function compileRateLimits(config: GatewayConfig, problems: RateLimitProblem[] = []): CompiledRateLimits {
  const section = config.rate_limits
  const policies = new Map(Object.entries(section?.policies ?? {}).map(([name, policy]) => [name, compilePolicy(name, policy, problems)]))
  const named = (names: readonly string[], at: Array<string | number>) => names.flatMap((name, i) => {
    const policy = policies.get(name)
    if (policy === undefined) problems.push({ path: [...at, i], message: `unknown rate limit policy "${name}"${didYouMean(name, policies.keys())}` })
    return policy === undefined ? [] : [policy]
  })
  const store = section?.store
  if (store?.type === 'redis' && store.url === undefined && config.authorization_server?.store?.type !== 'redis') {
    problems.push({ path: ['rate_limits', 'store', 'url'], message: 'is required: the authorization server has no Redis store to share' })
  }
  const defaults = named(section?.default ?? [], ['rate_limits', 'default'])
  const byRoute = new Map<string, readonly CompiledPolicy[]>()
  config.routes.forEach((route, index) => {
    const own = route.rate_limits === undefined ? defaults : named(route.rate_limits, ['routes', index, 'rate_limits'])
    if (own.length > 0 && route.auth === 'none' && own.some((policy) => policy.key.kind !== 'address' && policy.key.kind !== 'header' && policy.fallback === 'refuse')) {
      problems.push({ path: ['routes', index, 'rate_limits'], message: 'a policy keyed on the token with fallback: refuse would refuse every request of a route with auth: none' })
    }
    if (own.length > 0) byRoute.set(route.id, own)
  })
  const claimPaths = [...policies.values()].flatMap((policy) => policy.key.kind === 'claim' ? [policy.key.path] : [])
  return { policies, byRoute, claimPaths }
}
