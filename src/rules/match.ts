import { HTTP_METHODS } from '../config/schema.js'
import type { CompiledRule } from './compile.js'
import { matchSegments, splitPath } from './segments.js'

/**
 * The methods a route can name; a route without `methods` means all of these. Anything else (TRACE,
 * CONNECT, WebDAV verbs, …) matches no route: a method you cannot write in the config is never forwarded.
 */
const ROUTABLE_METHODS: ReadonlySet<string> = new Set(HTTP_METHODS)

/** The most specific rule for this method and (origin-form) path, or undefined (then see {@link allowedMethods}). */
export function matchRule(rules: readonly CompiledRule[], method: string, path: string): CompiledRule | undefined {
  return matchSplitRule(rules, method, path, splitPath(path))
}

/** {@link matchRule} with the path already split ({@link splitPath}), for a caller that reads the segments too. */
export function matchSplitRule(rules: readonly CompiledRule[], method: string, path: string, segments: readonly string[]): CompiledRule | undefined {
  if (!ROUTABLE_METHODS.has(method) || !path.startsWith('/')) return undefined
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i]!
    if ((rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments)) return rule
  }
  return undefined
}

/** Methods some rule accepts for this path: empty means 404, otherwise 405 with this `Allow`. */
export function allowedMethods(rules: readonly CompiledRule[], path: string): string[] {
  if (!path.startsWith('/')) return []
  const segments = splitPath(path)
  const allowed = new Set<string>()
  for (const rule of rules) {
    if (!matchSegments(rule.segments, segments)) continue
    for (const method of rule.methods ?? ROUTABLE_METHODS) allowed.add(method)
  }
  return [...allowed]
}
