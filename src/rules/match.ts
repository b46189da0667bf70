import type { CompiledRule } from './compile.js'

/** The most specific rule for this method and path, or undefined (then see {@link allowedMethods}). */
export function matchRule(rules: readonly CompiledRule[], method: string, path: string): CompiledRule | undefined {
  for (const rule of rules) {
    if ((rule.methods === null || rule.methods.has(method)) && rule.regex.test(path)) return rule
  }
  return undefined
}

/** Methods some rule accepts for this path: empty means 404, otherwise 405 with this `Allow`. */
export function allowedMethods(rules: readonly CompiledRule[], path: string): string[] {
  const allowed = new Set<string>()
  for (const rule of rules) {
    if (!rule.regex.test(path)) continue
    if (rule.methods === null) return []  // unreachable when matchRule failed; kept total
    for (const method of rule.methods) allowed.add(method)
  }
  return [...allowed]
}
