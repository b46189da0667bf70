/**
 * Scope hierarchies (`scope_implies:`): "mcp:admin implies mcp:write, which implies mcp:read". MCP
 * 2026-07-28 (Authorization, Step-Up Authorization Flow) asks servers to account for them, and most APIs have
 * one (`repo` covers `repo:status`). Compiled at load into, per scope, every scope that implies it
 * (transitively), so a route asking for `mcp:read` is satisfied by a token holding `mcp:admin`.
 *
 * Applied where scopes are checked, never to the token: `X-Auth-Scopes` still carries exactly what was granted,
 * and a challenge still names the scope a route asks for (the narrow one), not what would imply it.
 */

/** scope → the scopes that imply it, directly or through others. */
export type ImpliedBy = ReadonlyMap<string, readonly string[]>

export interface HierarchyProblem {
  path: Array<string | number>
  message: string
}

/** Null when there is no hierarchy (checks then cost what they cost without one). */
export function compileScopeImplies(implies: Readonly<Record<string, readonly string[]>> | undefined,
  problems: HierarchyProblem[]): ImpliedBy | null {
  if (implies === undefined) return null
  const direct = new Map<string, readonly string[]>()
  for (const [broad, narrower] of Object.entries(implies)) {
    narrower.forEach((narrow, i) => {
      if (narrow === broad) problems.push({ path: ['scope_implies', broad, i], message: `${broad} implies itself` })
    })
    direct.set(broad, narrower)
  }
  const impliedBy = new Map<string, Set<string>>()
  for (const broad of direct.keys()) {
    // Everything `broad` reaches, each once: a cycle (a implies b implies a) makes the two equivalent.
    const seen = new Set<string>()
    const pending = [...direct.get(broad)!]
    while (pending.length > 0) {
      const narrow = pending.pop()!
      if (seen.has(narrow)) continue
      seen.add(narrow)
      pending.push(...direct.get(narrow) ?? [])
    }
    seen.delete(broad)
    for (const narrow of seen) {
      let set = impliedBy.get(narrow)
      if (set === undefined) impliedBy.set(narrow, set = new Set())
      set.add(broad)
    }
  }
  return impliedBy.size === 0 ? null : new Map([...impliedBy].map(([narrow, broader]) => [narrow, [...broader].sort()]))
}

/** Whether `granted` holds `scope`, itself or a scope that implies it. */
export function holdsScope(granted: readonly string[], scope: string, impliedBy: ImpliedBy | null): boolean {
  if (granted.includes(scope)) return true
  if (impliedBy === null) return false
  const broader = impliedBy.get(scope)
  return broader !== undefined && broader.some((candidate) => granted.includes(candidate))
}
