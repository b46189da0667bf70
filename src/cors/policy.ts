/**
 * CORS at the gateway: the top-level `cors:` and each route's override compiled at load into a
 * policy per route, with the headers for each configured origin built once. Tolerant of a bad config (it is
 * also compiled while linting): entries that do not parse are skipped here and reported by lint.ts.
 */
import { HTTP_METHODS } from '../config/constants.js'
import type { CorsConfig, GatewayConfig, RouteCorsConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { matchesPattern, parseAllowedOrigin } from './origin.js'

/** Chromium's own cap (Firefox's is 24h): a policy change reaches every browser within this. */
export const MAX_AGE_CAP_SECONDS = 7200
export const DEFAULT_MAX_AGE = '10m'
export const DEFAULT_ALLOWED_HEADERS: readonly string[] = ['Authorization', 'Content-Type']
/**
 * Always exposed, being what the gateway itself sends a page: the Bearer challenge (with RFC 9728
 * `resource_metadata`), the rate limits' fields (draft-ietf-httpapi-ratelimit-headers) and `Retry-After` of a 429
 * or 503, and `DPoP-Nonce` (RFC 9449 §8: a browser DPoP client must read it to retry). A name on a response
 * without it exposes nothing.
 */
export const ALWAYS_EXPOSED: readonly string[] = ['WWW-Authenticate', 'RateLimit', 'RateLimit-Policy', 'Retry-After', 'DPoP-Nonce']

/** What the gateway adds to one response for one request's `Origin`. */
export interface CorsAnswer {
  /** `[name, value, …]` for a forwarded response (whose own `Vary` gets `Origin` merged in). */
  readonly list: readonly string[]
  /** The same plus `vary: Origin`, for the responses the gateway writes itself. */
  readonly headers: Readonly<Record<string, string>>
}

/** An origin (or a method) the route's policy does not allow: no CORS header, only `Vary: Origin`. */
export const NOT_ALLOWED: CorsAnswer = Object.freeze({ list: Object.freeze([]), headers: Object.freeze({ vary: 'Origin' }) })

export interface CorsPolicy {
  /** `upstream: true`: the upstream answers CORS; its preflights are forwarded unauthenticated, nothing is added. */
  readonly upstream: boolean
  /** The answer for each exact origin allowed. */
  readonly exact: ReadonlyMap<string, CorsAnswer>
  /** `*` (never with credentials): one answer for every origin. */
  readonly any: CorsAnswer | null
  readonly patterns: ReadonlyArray<{ readonly prefix: string; readonly tail: string }>
  readonly credentials: boolean
  readonly methods: ReadonlySet<string>
  readonly allowMethods: string
  /** `*` in `allowed_headers`: whatever a preflight asks for is allowed (and named back). */
  readonly anyHeader: boolean
  /** Lower case. */
  readonly headers: ReadonlySet<string>
  readonly allowHeaders: string
  readonly exposeHeaders: string
  /** `Access-Control-Max-Age`, in seconds. */
  readonly maxAge: string
}

/** The runtime's CORS switch: null when no `cors` is configured anywhere (then requests pay one comparison). */
export interface CorsRuntime {
  /** The top-level policy, for refusals no route decided (404, 405, a bad path); null when there is none. */
  readonly fallback: CorsPolicy | null
}

const UPSTREAM: CorsPolicy = Object.freeze({
  upstream: true, exact: new Map(), any: null, patterns: [], credentials: false, methods: new Set<string>(), allowMethods: '',
  anyHeader: false, headers: new Set<string>(), allowHeaders: '', exposeHeaders: '', maxAge: '0',
})

/** A route's `cors` as the schema allows it: absent, `true`, `false` or an object. */
export type RouteCors = boolean | RouteCorsConfig | undefined

/** The settings that apply to a route: its own keys, then the top-level ones, then the defaults. */
export function effectiveCors(global: CorsConfig | undefined, route: RouteCors): (CorsConfig & { upstream?: boolean }) | undefined {
  if (route === false) return undefined
  const own = typeof route === 'object' ? route : undefined
  if (own?.upstream) return { allowed_origins: [], upstream: true }
  const origins = own?.allowed_origins ?? global?.allowed_origins
  if (origins === undefined) return undefined
  return { ...global, ...own, allowed_origins: origins }
}

function answerFor(allowOrigin: string, credentials: boolean, expose: string): CorsAnswer {
  const list = ['access-control-allow-origin', allowOrigin]
  if (credentials) list.push('access-control-allow-credentials', 'true')
  list.push('access-control-expose-headers', expose)
  const headers: Record<string, string> = { vary: 'Origin' }
  for (let i = 0; i < list.length; i += 2) headers[list[i]!] = list[i + 1]!
  return { list, headers }
}

/** Names once each, the first spelling kept, compared without case. */
function unique(names: readonly string[]): string[] {
  const seen = new Set<string>()
  return names.filter((name) => !seen.has(name.toLowerCase()) && seen.add(name.toLowerCase()))
}

/**
 * The policy of a route (`routeMethods`: its `methods`, null for all), or of the top level (`route`
 * undefined, `routeMethods` null); null when CORS is off there.
 */
export function compileCorsPolicy(global: CorsConfig | undefined, route: RouteCors,
  routeMethods: ReadonlySet<string> | null): CorsPolicy | null {
  const settings = effectiveCors(global, route)
  if (settings === undefined) return null
  if (settings.upstream) return UPSTREAM
  const credentials = settings.allow_credentials ?? false
  const exposed = unique([...ALWAYS_EXPOSED, ...settings.exposed_headers ?? []]).join(', ')
  const exact = new Map<string, CorsAnswer>()
  const patterns: Array<{ prefix: string; tail: string }> = []
  let any: CorsAnswer | null = null
  for (const text of settings.allowed_origins) {
    const parsed = parseAllowedOrigin(text)
    if (typeof parsed === 'string') continue
    if (parsed.kind === 'any') any = credentials ? null : answerFor('*', false, exposed)
    else if (parsed.kind === 'exact') exact.set(parsed.origin, answerFor(parsed.origin, credentials, exposed))
    else patterns.push({ prefix: parsed.prefix, tail: parsed.tail })
  }
  const configured = settings.allowed_methods ?? HTTP_METHODS
  const methods = configured.filter((method) => routeMethods === null || routeMethods.has(method))
  const headers = unique(settings.allowed_headers ?? DEFAULT_ALLOWED_HEADERS)
  const anyHeader = !credentials && headers.includes('*')
  const seconds = Math.floor(parseDuration(settings.max_age ?? DEFAULT_MAX_AGE) / 1000)
  return {
    upstream: false,
    exact,
    any,
    patterns,
    credentials,
    methods: new Set(methods),
    allowMethods: methods.join(', '),
    anyHeader,
    headers: new Set(headers.map((name) => name.toLowerCase())),
    allowHeaders: headers.join(', '),
    exposeHeaders: exposed,
    maxAge: String(Math.min(seconds, MAX_AGE_CAP_SECONDS)),
  }
}

/** Null when neither the top level nor any route turns CORS on: the pipeline then skips it all. */
export function compileCorsRuntime(config: GatewayConfig, rules: ReadonlyArray<{ readonly cors: CorsPolicy | null }>): CorsRuntime | null {
  if (config.cors === undefined && rules.every((rule) => rule.cors === null)) return null
  return { fallback: compileCorsPolicy(config.cors, undefined, null) }
}

/** `Access-Control-Allow-Origin` for this `Origin` (itself, or `*`), or undefined when it is not allowed. */
export function allowedOrigin(policy: CorsPolicy, origin: string): string | undefined {
  if (policy.any !== null) return '*'
  if (policy.exact.has(origin)) return origin
  for (const pattern of policy.patterns) if (matchesPattern(origin, pattern)) return origin
  return undefined
}

/**
 * What an actual (not preflight) request's responses carry: null when the gateway does no CORS there (off, or
 * `upstream: true`); {@link NOT_ALLOWED} for an origin or a method the policy does not allow.
 */
export function corsAnswer(policy: CorsPolicy | null, origin: string, method: string | undefined): CorsAnswer | null {
  if (policy === null || policy.upstream) return null
  if (!policy.methods.has(method ?? 'GET')) return NOT_ALLOWED
  const found = policy.exact.get(origin) ?? policy.any
  if (found !== null && found !== undefined) return found
  for (const pattern of policy.patterns) {
    if (matchesPattern(origin, pattern)) return answerFor(origin, policy.credentials, policy.exposeHeaders)
  }
  return NOT_ALLOWED
}
