import type { Principal } from '../authn/principal.js'
import type { CompiledRule } from '../rules/compile.js'
import { InsufficientScope } from '../errors/oauth-errors.js'

/** Enforces the rule's `scopes.all` (every one) and `scopes.any` (at least one); throws InsufficientScope. */
export function requireScopes(principal: Principal, rule: CompiledRule): void {
  const granted = principal.scopes
  // Runs on every request: a loop, and the list of what is missing only when something is.
  for (const scope of rule.scopesAll) {
    if (!granted.includes(scope)) {
      const missing = rule.scopesAll.filter((wanted) => !granted.includes(wanted))
      throw new InsufficientScope(rule.scopesAll, `missing ${missing.join(' ')}`)
    }
  }
  const any = rule.scopesAny
  if (any !== null && !any.some((scope) => granted.includes(scope))) {
    throw new InsufficientScope(any, `none of ${any.join(' ')}`)
  }
}
