/**
 * Authorizing one MCP message: the route's rules, the method's and the tool's (or prompt's),
 * checked once the message is read. MCP 2026-07-28, Authorization, "Scope Challenge Handling": a token
 * short of scope gets ONE 403 `insufficient_scope` whose `scope` names every scope the operation needs (the
 * route's and the tool's), so the client's step-up asks for them all at once; then claim conditions
 * (403 access_denied), the route's first.
 */
import type { Principal } from '../common/principal.js'
import { holdsScope, type ImpliedBy } from '../authz/hierarchy.js'
import { requireConditions, type RouteAccess } from '../authz/scopes.js'
import type { RequestFacts } from '../claims/conditions.js'
import { InsufficientScope, MissingToken } from '../errors/oauth-errors.js'
import type { CompiledMcp, McpRule, NamedRules } from './compile.js'
import type { McpMessage } from './message.js'
import { foldName } from './names.js'

interface ScopeSet {
  /** `scopes` (the route's) or `mcp.tools.delete_order.scopes`: the metrics' condition label, without `.all`/`.any`. */
  readonly label: string
  readonly all: readonly string[]
  readonly any: readonly string[] | null
}

/** A tool's (or prompt's) rule: its exact name, else a configured name it folds to, else `"*"`. */
function namedRule(rules: NamedRules, name: string): McpRule | null {
  return rules.exact.get(name) ?? rules.folded.get(foldName(name)) ?? rules.fallback
}

/** The MCP rules of a message, the method's first; none for a JSON-RPC response. */
export function rulesFor(mcp: CompiledMcp, message: McpMessage): McpRule[] {
  const method = message.method
  if (method === undefined) return []
  const rules: McpRule[] = []
  const methodRule = mcp.methods.get(method)
  if (methodRule !== undefined) rules.push(methodRule)
  const named = mcp.named.get(method)
  const rule = named !== undefined && message.name !== undefined ? namedRule(named, message.name) : null
  if (rule !== null) rules.push(rule)
  return rules
}

/**
 * Every set holds, or one InsufficientScope naming the scopes of them all: each `all`, and of each `any` the
 * member the token holds (it is still needed) or, when it holds none, the whole list (as a route's `any`).
 * The condition label is the first set that failed.
 */
function requireScopeSets(granted: readonly string[], sets: readonly ScopeSet[], impliedBy: ImpliedBy | null): void {
  const holds = (scope: string) => holdsScope(granted, scope, impliedBy)
  let failed: string | undefined
  for (const set of sets) {
    if (failed === undefined && !set.all.every(holds)) failed = `${set.label}.all`
    if (failed === undefined && set.any !== null && !set.any.some(holds)) failed = `${set.label}.any`
  }
  if (failed === undefined) return
  const required = new Set<string>()
  for (const set of sets) {
    for (const scope of set.all) required.add(scope)
    if (set.any === null) continue
    const held = set.any.find(holds)
    for (const scope of held !== undefined ? [held] : set.any) required.add(scope)
  }
  const missing = [...required].filter((scope) => !holds(scope))
  throw new InsufficientScope([...required], `${failed}: missing ${missing.join(' ')}`, failed)
}

/**
 * Authorizes `message` on `rule` (which has `mcp`). The token's audience was checked when it was validated;
 * everything else of the route is checked here, with the message's rules. Without a token (`auth: optional`)
 * the route lets the request through, as for any other route, unless an MCP rule applies: then 401.
 * @returns the MCP rules applied (none: the route's rules alone)
 */
export function authorizeMessage(principal: Principal | undefined, rule: RouteAccess, mcp: CompiledMcp, message: McpMessage,
  request: RequestFacts): readonly McpRule[] {
  const rules = rulesFor(mcp, message)
  if (principal === undefined) {
    if (rules.length > 0) throw new MissingToken()
    return rules
  }
  requireScopeSets(principal.scopes, [
    { label: 'scopes', all: rule.scopesAll, any: rule.scopesAny },
    ...rules.map((mcpRule) => ({ label: `${mcpRule.label}.scopes`, all: mcpRule.scopesAll, any: mcpRule.scopesAny })),
  ], rule.impliedBy)
  if (rule.claims !== null) requireConditions(rule.claims, principal, request)
  for (const mcpRule of rules) if (mcpRule.claims !== null) requireConditions(mcpRule.claims, principal, request, `${mcpRule.label}.claims`)
  return rules
}
