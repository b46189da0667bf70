/**
 * `routes:` → a table of compiled rules, built once at load and sorted most specific first:
 * literal segments beat `*` (and `{name}`, a named `*`) beat `**` (compared left to right; a pattern that
 * has ended beats a `**` there), then a method list beats "all methods". Two rules that tie (equally specific, a path in
 * common, overlapping methods) are a config error, never a silent pick. A literal matches every
 * spelling an upstream decodes the same way (`:` and `%3A`, `%C3%A9` and `%c3%a9`).
 */
import { createHash } from 'node:crypto'
import { didYouMean } from '../config/suggest.js'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { parseSize } from '../config/units.js'
import { compileConditions, type CompiledConditions, type ParamPosition } from '../claims/conditions.js'
import type { Problem } from '../common/problem.js'
import { runAtOnce, sortSteps, type Steps } from '../common/slices.js'
import { claimHeaderReserved, compileClaimHeaders, type ClaimHeader } from '../claims/headers.js'
import { compileResources, type CompiledResource } from '../resources/metadata.js'
import { compileCorsPolicy, type CorsPolicy } from '../cors/policy.js'
import { compileMcp, type CompiledMcp } from '../mcp/compile.js'
import { compileScopeImplies, type ImpliedBy } from '../authz/hierarchy.js'
import type { ResourceChallenge } from '../errors/render.js'
import { compileRateLimits, type CompiledPolicy } from '../ratelimit/policy.js'
import { compareRank, compilePattern, patternsOverlap } from './pattern.js'

export type AuthMode = 'required' | 'optional' | 'none'

export interface CompiledRule {
  readonly id: string
  readonly index: number
  readonly path: string
  /** Per segment: a literal in canonical form, `*` (also for `{name}`) or `**`; `/` is one empty literal (see segments.ts). */
  readonly segments: readonly string[]
  /** The `{name}` segments of the path (read by `{ param: name }` claim conditions), where each sits among the request's segments. */
  readonly params: ReadonlyMap<string, ParamPosition>
  /** Per segment: 4 literal, 3 `*`, 1 `**`; compared left to right, higher wins (see {@link compareRank}). */
  readonly rank: readonly number[]
  /** `null` means every method. */
  readonly methods: ReadonlySet<string> | null
  readonly upstream: string
  readonly auth: AuthMode
  readonly scopesAll: readonly string[]
  readonly scopesAny: readonly string[] | null
  /** `scope_implies:`, the same for every route; null when there is none. */
  readonly impliedBy: ImpliedBy | null
  /** `claims:`; null when the route has none. */
  readonly claims: CompiledConditions | null
  /** `claim_headers:`; null when the route has none. */
  readonly claimHeaders: readonly ClaimHeader[] | null
  /** The RFC 9728 resource the route belongs to (`resources[].routes`); null when none. */
  readonly resource: CompiledResource | null
  /** What the route's challenges add when it belongs to a resource (its metadata URL, and its scopes on a 401). */
  readonly challenge: ResourceChallenge | null
  readonly maxBodySize: number
  /** CORS for the requests this route serves (`cors:`): null when off (no `cors` anywhere, or `cors: false`). */
  readonly cors: CorsPolicy | null
  /** `mcp:`: rules by tool, prompt and method for the route's POSTs; null when the route has none. */
  readonly mcp: CompiledMcp | null
  /**
   * Remove `Authorization` on this route although the header policy keeps it: an `mcp` route when
   * `forward.strip_authorization` is not set (MCP 2026-07-28: the server MUST NOT pass a client's token on).
   */
  readonly stripAuthorization: boolean
  /** `dpop:` (RFC 9449): null when the route does not say (its token issuer's mode, else `allowed`, applies). */
  readonly dpop: 'required' | 'allowed' | 'off' | null
  /** Rate limit policies (`rate_limits`): the route's own, else `rate_limits.default`; null when none. */
  readonly rateLimits: readonly CompiledPolicy[] | null
  /** Whether its responses carry the RateLimit-Policy and RateLimit fields (`rate_limit_headers`). */
  readonly rateLimitHeaders: boolean
}

/** Most specific first; ties in shape are ordered by method list presence (lists first). */
export function compareRules(a: CompiledRule, b: CompiledRule): number {
  return compareRank(a.rank, b.rank) || (a.methods ? 0 : 1) - (b.methods ? 0 : 1) || a.index - b.index
}

/**
 * The scopes a 401 names (MCP 2026-07-28, Scope Selection Strategy: the client asks for them at once): every
 * `scopes.all`, and the first of `scopes.any` (write the narrowest first).
 */
function challengeScope(route: RouteConfig): string | undefined {
  const scopes = [...new Set([...route.scopes?.all ?? [], ...route.scopes?.any?.slice(0, 1) ?? []])]
  return scopes.length > 0 ? scopes.join(' ') : undefined
}

export interface CompiledRules {
  rules: CompiledRule[]
  problems: Problem[]
  /** Each rule by the route it was compiled from: what the next reload may keep ({@link ReusableRules}). */
  byRoute: Map<RouteConfig, CompiledRule>
  /** How many rules were kept from `reuse` rather than compiled. */
  kept: number
}

const NO_SCOPES: readonly string[] = Object.freeze([])

/** The value under `key`, made by `make` the first time. */
function shared<T>(memo: Map<string, T>, key: string, make: () => T): T {
  let value = memo.get(key)
  if (value === undefined) memo.set(key, value = make())
  return value
}

/** Routes compiled between two places a slice may pause (common/slices.ts): well under its time budget. */
const SLICE = 25

/**
 * What a compiled rule depends on besides its own route: every key of the config but `routes` (its defaults, upstreams,
 * resources, scope hierarchy, rate limit policies, CORS, forwarding), as the SHA-256 of its JSON (the config holds
 * secrets; a digest is all the runtime keeps). Two configs with the same context compile an equal route to an equal rule.
 */
export function ruleContext(config: GatewayConfig): string {
  return createHash('sha256').update(JSON.stringify({ ...config, routes: undefined })).digest('base64')
}

/**
 * The table in service by the route objects it was compiled from ({@link CompiledRules.byRoute}), for a reload: a route
 * of the new config that is one of those objects (a reload's loader hands an unchanged route back as the object in
 * service) takes its compiled rule rather than being compiled again. Only for a config of the same {@link ruleContext}.
 */
export type ReusableRules = ReadonlyMap<RouteConfig, CompiledRule>

/** The route table of `config`, in one go, every problem checked (loading, `portcullis check`). */
export function compileRules(config: GatewayConfig): CompiledRules {
  return runAtOnce(compileRuleSteps(config))
}

/**
 * The route table as steps: yields after every {@link SLICE} routes; returns the sorted table and its problems. A
 * runtime built from a loaded config passes `checkTies: false`: the load has found every tie already (lint.ts), and
 * the check is the one part of the compile that finds problems only.
 */
export function* compileRuleSteps(config: GatewayConfig, { checkTies = true, reuse }: { checkTies?: boolean; reuse?: ReusableRules | undefined } = {},
): Steps<CompiledRules> {
  const defaultMaxBody = parseSize(config.server?.max_body_size ?? '10mb')
  const rules: CompiledRule[] = []
  const problems: Problem[] = []
  const ids = new Map<string, number>()
  const reserved = claimHeaderReserved(config)
  const resources = compileResources(config).byRoute
  const impliedBy = compileScopeImplies(config.scope_implies, problems)
  const rateLimits = compileRateLimits(config, problems).byRoute
  // A route without a `cors` of its own takes the top level's: one policy per method list, not one per route (each
  // compile parses `cors.allowed_origins` again; policies are immutable, so rules may share one).
  const corsByMethods = new Map<string, CorsPolicy | null>()
  const topLevelCors = (methods: ReadonlySet<string> | null): CorsPolicy | null =>
    shared(corsByMethods, methods === null ? '*' : [...methods].sort().join(' '), () => compileCorsPolicy(config.cors, undefined, methods))
  // What many rules have alike, one frozen copy shared (rules are read only): a rank per path shape, a methods set per
  // method list in its order (a 405's Allow lists it so). A reload builds the table beside the one in service, and
  // each object it makes is copied twice by the young generation's collections on its way to the old one.
  const ranks = new Map<string, readonly number[]>()
  const methodSets = new Map<string, ReadonlySet<string>>()
  const routes = config.routes
  const byRoute = new Map<RouteConfig, CompiledRule>()
  let kept = 0
  for (let index = 0; index < routes.length; index++) {
    if (index > 0 && index % SLICE === 0) yield
    const route = routes[index]!
    const earlier = ids.get(route.id)
    if (earlier !== undefined) problems.push({ path: ['routes', index, 'id'], message: `duplicate route id (also routes[${earlier}])` })
    ids.set(route.id, index)
    // Only a frozen route (a loaded one is frozen through: check/load.ts) is sure to be what its rule was compiled from.
    const previous = Object.isFrozen(route) ? reuse?.get(route) : undefined
    if (previous !== undefined) {
      // Where it stands decides ties in specificity (compareRules): a route that moved gets a copy at its place.
      const rule = previous.index === index ? previous : atPlace(previous, index)
      rules.push(rule)
      byRoute.set(route, rule)
      kept++
      continue
    }
    // The path to a key of this route, for a problem (made only then, or for a section the route has).
    const at = (...keys: Array<string | number>): Array<string | number> => ['routes', index, ...keys]
    if (!Object.hasOwn(config.upstreams, route.upstream)) {
      problems.push({ path: at('upstream'), message: `unknown upstream "${route.upstream}"${didYouMean(route.upstream, Object.keys(config.upstreams))}` })
    }
    const auth = route.auth ?? 'required'
    if (auth === 'none' && (route.scopes?.all?.length || route.scopes?.any?.length)) {
      problems.push({ path: at('scopes'), message: 'scopes need auth: required or optional' })
    }
    const compiled = compilePattern(route.path)
    if (typeof compiled === 'string') {
      problems.push({ path: at('path'), message: compiled })
      continue
    }
    if (auth === 'none' && route.claims) problems.push({ path: at('claims'), message: 'claims needs auth: required or optional' })
    if (auth === 'none' && route.claim_headers) problems.push({ path: at('claim_headers'), message: 'claim_headers needs auth: required or optional' })
    const claims = route.claims === undefined ? null : compileConditions(route.claims, at('claims'), compiled.params, problems) ?? null
    const claimHeaders = route.claim_headers === undefined ? null : compileClaimHeaders(route.claim_headers, at('claim_headers'), reserved, problems)
    const resource = resources.get(route.id) ?? null
    const methods = route.methods ? shared(methodSets, route.methods.join(' '), () => new Set(route.methods)) : null
    const rule: CompiledRule = {
      id: route.id,
      index,
      path: route.path,
      segments: compiled.segments,
      rank: shared(ranks, compiled.rank.join(''), () => Object.freeze(compiled.rank)),
      params: compiled.params,
      claims,
      claimHeaders,
      resource,
      challenge: resource === null ? null : { metadataUrl: resource.metadataUrl, scope: challengeScope(route) },
      methods,
      upstream: route.upstream,
      auth,
      scopesAll: route.scopes?.all ?? NO_SCOPES,
      scopesAny: route.scopes?.any ?? null,
      impliedBy,
      maxBodySize: route.max_body_size ? parseSize(route.max_body_size) : defaultMaxBody,
      cors: route.cors === undefined ? topLevelCors(methods) : compileCorsPolicy(config.cors, route.cors, methods),
      mcp: route.mcp === undefined ? null : compileMcp(route.mcp, at('mcp'), auth, compiled.params, problems),
      stripAuthorization: route.mcp !== undefined && config.forward?.strip_authorization === undefined,
      dpop: route.dpop ?? null,
      rateLimits: rateLimits.get(route.id) ?? null,
      rateLimitHeaders: route.rate_limit_headers ?? true,
    }
    rules.push(rule)
    byRoute.set(route, rule)
  }
  yield
  yield* sortSteps(rules, compareRules)
  if (checkTies) {
    yield
    yield* tieSteps(rules, problems)
  }
  return { rules, problems, byRoute, kept }
}

/**
 * A kept rule at another place: the compile's object literal again, its fields in the same order, so that a table with
 * moved rules has one shape (V8 map) for the match to read, as a spread copy would not.
 */
function atPlace(r: CompiledRule, index: number): CompiledRule {
  return {
    id: r.id, index, path: r.path, segments: r.segments, rank: r.rank, params: r.params, claims: r.claims, claimHeaders: r.claimHeaders,
    resource: r.resource, challenge: r.challenge, methods: r.methods, upstream: r.upstream, auth: r.auth, scopesAll: r.scopesAll,
    scopesAny: r.scopesAny, impliedBy: r.impliedBy, maxBodySize: r.maxBodySize, cors: r.cors, mcp: r.mcp,
    stripAuthorization: r.stripAuthorization, dpop: r.dpop, rateLimits: r.rateLimits, rateLimitHeaders: r.rateLimitHeaders,
  }
}

/** The literal segments a pattern starts with, up to its first `*` or `**`: two equally ranked rules share a path only if these are equal. */
function literalPrefix(segments: readonly string[]): string {
  const end = segments.findIndex((segment) => segment === '*' || segment === '**')
  return (end === -1 ? segments : segments.slice(0, end)).join('/')
}

/**
 * Two rules that tie (equally specific, a path in common, overlapping methods) are an error. Equally ranked rules are
 * contiguous in the sorted table, and among them only those with the same literal prefix can share a path (the
 * prefix sits at the same segments in both, before any `**`): compared in those groups, the check stays linear in
 * the number of routes for a real table rather than quadratic.
 */
function* tieSteps(rules: readonly CompiledRule[], problems: Problem[]): Steps<void> {
  let sinceYield = 0
  for (let start = 0; start < rules.length;) {
    let end = start + 1
    while (end < rules.length && compareRank(rules[start]!.rank, rules[end]!.rank) === 0) end++
    const groups = new Map<string, CompiledRule[]>()
    for (let i = start; i < end; i++) {
      const key = literalPrefix(rules[i]!.segments)
      const group = groups.get(key)
      if (group) group.push(rules[i]!)
      else groups.set(key, [rules[i]!])
    }
    for (const group of groups.values()) {
      for (let i = 0; i < group.length; i++) for (let j = i + 1; j < group.length; j++) reportTie(group[i]!, group[j]!, problems)
    }
    sinceYield += end - start
    start = end
    if (sinceYield >= SLICE) { sinceYield = 0; yield }
  }
}

function reportTie(a: CompiledRule, b: CompiledRule, problems: Problem[]): void {
  const methodsOverlap = a.methods === null || b.methods === null
    ? a.methods === b.methods
    : [...a.methods].some((method) => b.methods!.has(method))
  if (!methodsOverlap) return
  const samePattern = a.segments.length === b.segments.length && a.segments.every((segment, k) => segment === b.segments[k])
  // Equally specific patterns that differ can still share paths once a `**` shifts a literal
  // (`/**/a/**` and `/**/b/**` both match /a/b): no specificity order resolves those either.
  if (!samePattern && !patternsOverlap(a.segments, b.segments)) return
  const later = a.index > b.index ? a : b
  const earlier = later === a ? b : a
  problems.push({
    path: ['routes', later.index, 'path'],
    message: samePattern
      ? `ties with routes[${earlier.index}] ("${earlier.id}"): same path shape and overlapping methods`
      : `ties with routes[${earlier.index}] ("${earlier.id}"): equally specific, both match some paths, overlapping methods`,
  })
}
