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
  const { paths, names, readsAud } = readByRoutes(rules)
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
  const kept = new Set(paths.map((path) => path.segments[0]!))
  if (readsAud) kept.add('aud')
  return { kept: [...kept].sort(), headerNames: [...names].sort(), byIssuer }
}

/**
 * What the routes read of a token, in one pass over the table: every claim path (conditions, claim headers, MCP rules, rate
 * limit policies keyed on a claim), the headers their claim mappings set, and whether a route belongs to a resource (its
 * routes take only tokens issued for it, RFC 9728 `resources[]`: they read `aud`). Null checks, not `?? []`: an empty
 * array made per rule is 10,000 objects in a reload of 10,000 routes.
 */
function readByRoutes(rules: readonly CompiledRule[]): { paths: ClaimPath[]; names: Set<string>; readsAud: boolean } {
  const paths: ClaimPath[] = []
  const names = new Set<string>()
  let readsAud = false
  for (const rule of rules) {
    if (rule.claims !== null) paths.push(...conditionPaths(rule.claims))
    if (rule.claimHeaders !== null) {
      for (const header of rule.claimHeaders) {
        paths.push(header.path)
        names.add(header.name)
      }
    }
    if (rule.mcp !== null) paths.push(...mcpClaimPaths(rule.mcp))
    if (rule.rateLimits !== null) for (const policy of rule.rateLimits) if (policy.key.kind === 'claim') paths.push(policy.key.path)
    if (rule.resource !== null) readsAud = true
  }
  return { paths, names, readsAud }
}
