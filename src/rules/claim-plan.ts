/**
 * What the whole config reads of tokens' claims, worked out once per load: which top-level claims
 * a principal keeps (nothing else of a token stays in the caches), which headers claim mappings set (all
 * removed from every client request), and each issuer's mapping.
 */
import type { GatewayConfig } from '../config/schema.js'
import type { CompiledRule } from './compile.js'
import { conditionPaths } from '../claims/conditions.js'
import { mcpClaimPaths } from '../mcp/compile.js'
import type { Problem } from '../common/problem.js'
import { claimHeaderReserved, compileClaimHeaders, type ClaimHeader } from '../claims/headers.js'
import { compileIssuerClaims } from '../claims/issuer.js'
import type { ClaimPath } from '../claims/path.js'

export interface ClaimPlan {
  /** Sorted: part of what decides whether a reload may keep the authenticator and its caches. */
  readonly kept: readonly string[]
  readonly headerNames: readonly string[]
  readonly byIssuer: ReadonlyMap<string, readonly ClaimHeader[]>
}

/** The plan, with every problem of the issuers' claim settings (the routes' are compileRules's). */
export function compileClaimPlan(config: GatewayConfig, rules: readonly CompiledRule[], problems: Problem[] = []): ClaimPlan {
  const reserved = claimHeaderReserved(config)
  const paths: ClaimPath[] = routeClaimPaths(rules)
  const names = new Set<string>()
  // Null checks, not `?? []`: an empty array made per rule is 10,000 objects in a reload of 10,000 routes.
  for (const rule of rules) if (rule.claimHeaders !== null) for (const header of rule.claimHeaders) names.add(header.name)
  const byIssuer = new Map<string, readonly ClaimHeader[]>()
  ;(config.issuers ?? []).forEach((issuer, i) => {
    compileIssuerClaims(issuer, ['issuers', i], problems)
    const headers = compileClaimHeaders(issuer.claim_headers, ['issuers', i, 'claim_headers'], reserved, problems)
    if (!headers) return
    byIssuer.set(issuer.issuer, headers)
    for (const header of headers) {
      names.add(header.name)
      paths.push(header.path)
    }
  })
  // Rate limit policies keyed on a claim (`key: claim:<path>`) read it from the principal too.
  for (const rule of rules) if (rule.rateLimits !== null) for (const policy of rule.rateLimits) if (policy.key.kind === 'claim') paths.push(policy.key.path)
  const kept = new Set(paths.map((path) => path.segments[0]!))
  // A resource's routes take only tokens issued for it (RFC 9728, `resources[]`): they read `aud`.
  if (rules.some((rule) => rule.resource !== null)) kept.add('aud')
  return { kept: [...kept].sort(), headerNames: [...names].sort(), byIssuer }
}

/** Every claim path the routes read (conditions and claim headers); nothing made for a route that reads none. */
function routeClaimPaths(rules: readonly CompiledRule[]): ClaimPath[] {
  const paths: ClaimPath[] = []
  for (const rule of rules) {
    if (rule.claims !== null) paths.push(...conditionPaths(rule.claims))
    if (rule.claimHeaders !== null) for (const header of rule.claimHeaders) paths.push(header.path)
    if (rule.mcp !== null) paths.push(...mcpClaimPaths(rule.mcp))
  }
  return paths
}
