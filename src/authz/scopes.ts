import type { IncomingHttpHeaders } from 'node:http'
import { audienceMatches, type Principal } from '../common/principal.js'
import { unmetCondition, type CompiledConditions, type RequestFacts } from '../claims/conditions.js'
import type { CompiledResource } from '../resources/metadata.js'
import { holdsScope, type ImpliedBy } from './hierarchy.js'
import { ClaimsNotSatisfied, InsufficientScope, InvalidToken } from '../errors/oauth-errors.js'

/** What authorization reads of a route: `scopes`, `scope_implies`, `claims`, and its `resources` entry. */
export interface RouteAccess {
  readonly scopesAll: readonly string[]
  readonly scopesAny: readonly string[] | null
  readonly impliedBy: ImpliedBy | null
  readonly claims: CompiledConditions | null
  readonly resource: Pick<CompiledResource, 'identifier' | 'audiences'> | null
}

/**
 * Enforces the rule's `scopes.all` (every one) and `scopes.any` (at least one), each held itself or through a
 * scope that implies it (`scope_implies`); throws InsufficientScope.
 */
export function requireScopes(principal: Principal, rule: RouteAccess): void {
  const granted = principal.scopes
  const impliedBy = rule.impliedBy
  // Runs on every request: a loop, and the list of what is missing only when something is.
  const all = rule.scopesAll
  for (let i = 0; i < all.length; i++) {
    const scope = all[i]!
    if (!granted.includes(scope) && !holdsScope(granted, scope, impliedBy)) {
      const missing = rule.scopesAll.filter((wanted) => !holdsScope(granted, wanted, impliedBy))
      throw new InsufficientScope(rule.scopesAll, `missing ${missing.join(' ')}`, 'scopes.all')
    }
  }
  const any = rule.scopesAny
  if (any !== null && !any.some((scope) => holdsScope(granted, scope, impliedBy))) {
    throw new InsufficientScope(any, `none of ${any.join(' ')}`, 'scopes.any')
  }
}

/**
 * RFC 8707 / RFC 9728: on a resource's routes, only a token issued for that resource; on a route outside every
 * resource, only one issued for its issuer's own audience, never one issued for resources alone (401: it is
 * the wrong token).
 */
export function requireAudience(principal: Principal, rule: RouteAccess): void {
  const resource = rule.resource
  if (resource === null) {
    if (principal.resourceOnly === true) throw new InvalidToken('wrong_resource: aud names resources only, and this route is in none', undefined, 'wrong_audience')
  } else if (!audienceMatches(principal.claims?.aud, resource.audiences)) {
    throw new InvalidToken(`wrong_resource: aud is not ${resource.identifier}`, undefined, 'wrong_audience')
  }
}

/** Claim conditions: ClaimsNotSatisfied (403 access_denied) for the first that fails; `name` prefixes `any`'s label. */
export function requireConditions(conditions: CompiledConditions, principal: Principal, request: RequestFacts, name = 'claims'): void {
  const unmet = unmetCondition(conditions, principal.claims, request)
  if (unmet === undefined) return
  if (unmet === 'any') throw new ClaimsNotSatisfied(`${name}.any`, `${name}.any: none of ${conditions.any!.map((condition) => condition.text).join('; ')}`)
  throw new ClaimsNotSatisfied(unmet.label, `${unmet.label}: ${unmet.text}`)
}

/**
 * The route's scopes (403 insufficient_scope), then its claim conditions (403 access_denied), which
 * may read the request's path parameters (`segments`, canonical) and headers.
 */
export function authorize(principal: Principal, rule: RouteAccess, headers: IncomingHttpHeaders, segments: readonly string[]): void {
  requireAudience(principal, rule)
  requireScopes(principal, rule)
  const claims = rule.claims
  if (claims === null) return
  requireConditions(claims, principal, { headers, segments })
}
