/**
 * `routes:` → a table of compiled rules, built once at load and sorted most specific first:
 * literal segments beat `*` beat `**` (compared left to right), then a method list beats "all methods".
 * Two rules that tie (same pattern shape, overlapping methods) are a config error, never a silent pick.
 */
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { parseSize } from '../config/units.js'

export type AuthMode = 'required' | 'optional' | 'none'

export interface CompiledRule {
  readonly id: string
  readonly index: number
  readonly path: string
  readonly regex: RegExp
  /** Per segment: 3 literal, 2 `*`, 1 `**`; compared lexicographically, higher wins. */
  readonly rank: readonly number[]
  /** `null` means every method. */
  readonly methods: ReadonlySet<string> | null
  readonly upstream: string
  readonly auth: AuthMode
  readonly scopesAll: readonly string[]
  readonly scopesAny: readonly string[] | null
  readonly maxBodySize: number
}

export interface RuleProblem {
  path: Array<string | number>
  message: string
}

const LITERAL_SEGMENT = /^[A-Za-z0-9\-._~!$&'()+,;=:@%]*$/

function compilePattern(pattern: string): { regex: RegExp; rank: number[] } | string {
  if (pattern === '/') return { regex: /^\/$/, rank: [] }
  const segments = pattern.slice(1).split('/')
  let source = '^'
  const rank: number[] = []
  for (const [i, segment] of segments.entries()) {
    if (segment === '**') {
      if (segments[i - 1] === '**') return 'has "**" twice in a row'
      source += '(?:/.*)?'
      rank.push(1)
    } else if (segment === '*') {
      source += '/[^/]+'
      rank.push(2)
    } else {
      if (segment.includes('*')) return `segment "${segment}": "*" and "**" must be whole segments`
      if (segment === '' && i !== segments.length - 1) return 'has an empty segment ("//")'
      if (segment === '.' || segment === '..') return 'has a dot-segment'
      if (!LITERAL_SEGMENT.test(segment) || /%(2f|5c|00)/i.test(segment)) return `segment "${segment}" has a character a request path cannot carry`
      source += '/' + segment.replace(/[.+()$^|[\]{}\\]/g, '\\$&')
      rank.push(3)
    }
  }
  return { regex: new RegExp(source + '$'), rank }
}

function compareRank(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const diff = (b[i] ?? 0) - (a[i] ?? 0)
    if (diff !== 0) return diff
  }
  return 0
}

/** Most specific first; ties in shape are ordered by method list presence (lists first). */
export function compareRules(a: CompiledRule, b: CompiledRule): number {
  return compareRank(a.rank, b.rank) || (a.methods ? 0 : 1) - (b.methods ? 0 : 1) || a.index - b.index
}

export function compileRules(config: GatewayConfig): { rules: CompiledRule[]; problems: RuleProblem[] } {
  const defaultMaxBody = parseSize(config.server?.max_body_size ?? '10mb')
  const rules: CompiledRule[] = []
  const problems: RuleProblem[] = []
  const ids = new Map<string, number>()
  config.routes.forEach((route: RouteConfig, index) => {
    const at = ['routes', index]
    if (ids.has(route.id)) problems.push({ path: [...at, 'id'], message: `duplicate route id (also routes[${ids.get(route.id)}])` })
    ids.set(route.id, index)
    if (!Object.hasOwn(config.upstreams, route.upstream)) {
      problems.push({ path: [...at, 'upstream'], message: `unknown upstream "${route.upstream}"` })
    }
    const auth = route.auth ?? 'required'
    if (auth === 'none' && (route.scopes?.all?.length || route.scopes?.any?.length)) {
      problems.push({ path: [...at, 'scopes'], message: 'scopes need auth: required or optional' })
    }
    const compiled = compilePattern(route.path)
    if (typeof compiled === 'string') {
      problems.push({ path: [...at, 'path'], message: compiled })
      return
    }
    rules.push({
      id: route.id,
      index,
      path: route.path,
      ...compiled,
      methods: route.methods ? new Set(route.methods) : null,
      upstream: route.upstream,
      auth,
      scopesAll: route.scopes?.all ?? [],
      scopesAny: route.scopes?.any ?? null,
      maxBodySize: route.max_body_size ? parseSize(route.max_body_size) : defaultMaxBody,
    })
  })
  rules.sort(compareRules)
  for (let i = 0; i < rules.length; i++) {
    for (let j = i + 1; j < rules.length; j++) {
      const a = rules[i]!
      const b = rules[j]!
      if (compareRank(a.rank, b.rank) !== 0) break
      if (a.regex.source !== b.regex.source) continue
      const overlap = a.methods === null || b.methods === null
        ? a.methods === b.methods
        : [...a.methods].some((method) => b.methods!.has(method))
      if (overlap) {
        const later = a.index > b.index ? a : b
        const earlier = later === a ? b : a
        problems.push({
          path: ['routes', later.index, 'path'],
          message: `ties with routes[${earlier.index}] ("${earlier.id}"): same path shape and overlapping methods`,
        })
      }
    }
  }
  return { rules, problems }
}
