/**
 * The path pattern of a route (`routes[].path`): literal segments, `*`, `{name}` (a named `*`) and `**`, compiled
 * to segments and a rank, the rank's order (most specific first: literal beats `*` beats the pattern's end beats
 * `**`, left to right), and whether two patterns share a path. A literal matches every spelling an upstream decodes
 * the same way (`:` and `%3A`, `%C3%A9` and `%c3%a9`).
 */
import type { ParamPosition } from '../claims/conditions.js'
import { pathProblem } from './normalize.js'
import { canonicalSegment } from './segments.js'

const LITERAL = 4
const STAR = 3
/** Where a pattern has ended: it beats a `**` there (`/a` is more specific than `/a/**` for `/a`). */
const END = 2
const GLOBSTAR = 1

const LITERAL_SEGMENT = /^[A-Za-z0-9\-._~!$&'()+,=:@%]*$/
const PARAM_SEGMENT = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/
const NO_PARAMS: ReadonlyMap<string, ParamPosition> = new Map()

export interface CompiledPattern {
  segments: string[]
  rank: number[]
  params: ReadonlyMap<string, ParamPosition>
}

/**
 * Where each `{name}` sits: before the first `**`, at its own index; after the last, counted from the end
 * (every segment there is exactly one request segment). Between two `**`, nowhere in particular: refused.
 */
function paramPositions(segments: readonly string[], found: ReadonlyMap<string, number>): ReadonlyMap<string, ParamPosition> | string {
  if (found.size === 0) return NO_PARAMS
  const first = segments.indexOf('**')
  const last = segments.lastIndexOf('**')
  const positions = new Map<string, ParamPosition>()
  for (const [name, i] of found) {
    if (first === -1 || i < first) positions.set(name, { index: i, fromEnd: false })
    else if (i > last) positions.set(name, { index: segments.length - i, fromEnd: true })
    else return `{${name}} sits between two "**", so no one segment is it`
  }
  return positions
}

export function compilePattern(pattern: string): CompiledPattern | string {
  if (pattern === '/') return { segments: [''], rank: [], params: NO_PARAMS }
  const segments = pattern.slice(1).split('/')
  const rank: number[] = []
  const canonical: string[] = []
  let params: Map<string, number> | undefined
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i]!
    // Most segments are plain literals: characters LITERAL_SEGMENT allows cannot make `*`, `**`, `{name}` or the
    // request hygiene's forbidden characters, so only an escape or a dot-segment is left to look at.
    if (segment !== '' && LITERAL_SEGMENT.test(segment)) {
      if (segment === '.' || segment === '..') return 'has a dot-segment'
      if (segment.includes('%') && pathProblem(`/${segment}`)) return `segment "${segment}" has a character a request path cannot carry`
      rank.push(LITERAL)
      canonical.push(segment.includes('%') ? canonicalSegment(segment) : segment)
      continue
    }
    const param = PARAM_SEGMENT.exec(segment)
    if (segment === '**') {
      if (segments[i - 1] === '**') return 'has "**" twice in a row'
      rank.push(GLOBSTAR)
      canonical.push(segment)
    } else if (segment === '*') {
      rank.push(STAR)
      canonical.push(segment)
    } else if (param) {
      // A named `*`: one non-empty segment, ranked as `*`.
      params ??= new Map<string, number>()
      if (params.has(param[1]!)) return `has the path parameter {${param[1]}} twice`
      params.set(param[1]!, i)
      rank.push(STAR)
      canonical.push('*')
    } else if (segment.includes('{') || segment.includes('}')) {
      return `segment "${segment}": a path parameter is a whole segment, {name}, of letters, digits and _ (not starting with a digit)`
    } else if (segment.includes('*')) {
      return `segment "${segment}": "*" and "**" must be whole segments`
    } else if (segment === '') {
      if (i !== segments.length - 1) return 'has an empty segment ("//")'
      rank.push(LITERAL)
      canonical.push(segment)
    } else {
      // A literal the request hygiene refuses could never match: say so at load time.
      return `segment "${segment}" has a character a request path cannot carry`
    }
  }
  const positions = params === undefined ? NO_PARAMS : paramPositions(canonical, params)
  if (typeof positions === 'string') return positions
  return { segments: canonical, rank, params: positions }
}

/** Literal beats `*` beats the pattern's end beats `**`, segment by segment from the left. */
export function compareRank(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const diff = (b[i] ?? END) - (a[i] ?? END)
    if (diff !== 0) return diff
  }
  return 0
}

/** Whether some path matches both patterns (as {@link CompiledRule.segments}). */
export function patternsOverlap(a: readonly string[], b: readonly string[]): boolean {
  const seen = new Set<number>()
  const one = (x: string, y: string) => x === y || (x === '*' && y !== '') || (y === '*' && x !== '')
  const from = (i: number, j: number): boolean => {
    if (i === a.length && j === b.length) return true
    const key = i * (b.length + 1) + j
    if (seen.has(key)) return false
    seen.add(key)
    const x = a[i]
    const y = b[j]
    if (x === '**' && (from(i + 1, j) || (y !== undefined && from(i, j + 1)))) return true
    if (y === '**' && (from(i, j + 1) || (x !== undefined && from(i + 1, j)))) return true
    return x !== undefined && y !== undefined && x !== '**' && y !== '**' && one(x, y) && from(i + 1, j + 1)
  }
  return from(0, 0)
}
