import { HTTP_METHODS } from '../config/constants.js'
import type { CompiledRule } from './compile.js'
import { RouteIndex } from './route-index.js'
import { splitPath } from './segments.js'

export { RouteIndex }

/**
 * The methods a route can name; a route without `methods` means all of these. Anything else (TRACE,
 * CONNECT, WebDAV verbs, …) matches no route: a method you cannot write in the config is never forwarded.
 */
const ROUTABLE_METHODS: ReadonlySet<string> = new Set(HTTP_METHODS)

/** The most specific rule for this method and (origin-form) path, or undefined (then see {@link allowedMethods}). */
export function matchRule(rules: readonly CompiledRule[], method: string, path: string): CompiledRule | undefined {
  return matchSplitRule(RouteIndex.of(rules), method, path, splitPath(path))
}

/** {@link matchRule} on the table's index, with the path already split ({@link splitPath}), for a caller that reads the segments too. */
export function matchSplitRule(table: RouteIndex, method: string, path: string, segments: readonly string[]): CompiledRule | undefined {
  if (!ROUTABLE_METHODS.has(method) || !path.startsWith('/')) return undefined
  return table.match(method, segments)
}

/**
 * Methods some rule accepts for this path: empty means 404, otherwise 405 with this `Allow`.
 * @param segments the path's, when the caller has split it already ({@link splitPath})
 */
export function allowedMethods(table: RouteIndex | readonly CompiledRule[], path: string, segments?: readonly string[]): string[] {
  if (!path.startsWith('/')) return []
  const index = table instanceof RouteIndex ? table : RouteIndex.of(table)
  const allowed = new Set<string>()
  for (const rule of index.matchingAnyMethod(segments ?? splitPath(path))) {
    for (const method of rule.methods ?? ROUTABLE_METHODS) allowed.add(method)
  }
  return [...allowed]
}
