/** What the schema cannot say about `cors:` and the routes' `cors:`; each problem names its key. */
import type { CorsConfig, GatewayConfig, RouteCorsConfig } from '../config/schema.js'
import type { Problem } from '../common/problem.js'
import { parseDuration } from '../config/units.js'
import { parseAllowedOrigin } from './origin.js'
import { effectiveCors, MAX_AGE_CAP_SECONDS } from './policy.js'

type At = Array<string | number>

/** The keys a block sets itself: origins, `max_age`. */
function checkOwn(own: Partial<CorsConfig>, at: At, problems: Problem[]): void {
  const origins = own.allowed_origins
  if (origins !== undefined) {
    if (origins.length === 0) problems.push({ path: [...at, 'allowed_origins'], message: 'must list at least one origin (to turn CORS off, leave cors out or set cors: false on a route)' })
    origins.forEach((text, index) => {
      const parsed = parseAllowedOrigin(text)
      if (typeof parsed === 'string') problems.push({ path: [...at, 'allowed_origins', index], message: `"${text}" ${parsed}` })
      else if (parsed.kind === 'any' && origins.length > 1) {
        problems.push({ path: [...at, 'allowed_origins', index], message: '"*" allows every origin: list it alone' })
      }
    })
  }
  if (own.max_age !== undefined && parseDuration(own.max_age) > MAX_AGE_CAP_SECONDS * 1000) {
    problems.push({ path: [...at, 'max_age'], message: `must be at most 2h (${MAX_AGE_CAP_SECONDS} s, Chromium's own cap)` })
  }
}

/**
 * Fetch §3.2.5: with credentials, `*` is not a wildcard (for origins it would also hand every site the
 * user's cookies): refused whichever block sets it, reported at a key of `own` when `own` set one of the two.
 */
function checkCredentials(effective: CorsConfig, own: Partial<CorsConfig>, at: At, problems: Problem[]): void {
  if (!effective.allow_credentials) return
  const ownCredentials = own.allow_credentials !== undefined
  const star = effective.allowed_origins.indexOf('*')
  if (star !== -1 && (ownCredentials || own.allowed_origins !== undefined)) {
    problems.push({
      path: ownCredentials ? [...at, 'allow_credentials'] : [...at, 'allowed_origins', star],
      message: 'allow_credentials: true cannot go with allowed_origins: ["*"]: list the origins that may send credentials',
    })
  }
  for (const key of ['allowed_headers', 'exposed_headers'] as const) {
    const index = effective[key]?.indexOf('*') ?? -1
    if (index === -1 || !(ownCredentials || own[key] !== undefined)) continue
    problems.push({
      path: ownCredentials ? [...at, 'allow_credentials'] : [...at, key, index],
      message: `allow_credentials: true cannot go with "*" in ${key} (browsers read it as a header named "*"): name the headers`,
    })
  }
}

function checkRoute(config: GatewayConfig, cors: true | RouteCorsConfig, methods: readonly string[] | undefined, at: At,
  problems: Problem[]): void {
  if (cors === true || cors.upstream) {
    if (cors === true && config.cors === undefined) problems.push({ path: at, message: 'true uses the top-level cors, and there is none' })
    for (const key of cors === true ? [] : Object.keys(cors).filter((name) => name !== 'upstream')) {
      problems.push({ path: [...at, key], message: 'does not go with upstream: true (the upstream answers CORS itself, and the gateway adds nothing)' })
    }
    return
  }
  if (config.cors === undefined && cors.allowed_origins === undefined) {
    problems.push({ path: at, message: 'needs allowed_origins: there is no top-level cors to take them from' })
  }
  checkOwn(cors, at, problems)
  const effective = effectiveCors(config.cors, cors)
  if (effective !== undefined) checkCredentials(effective, cors, at, problems)
  cors.allowed_methods?.forEach((method, index) => {
    if (methods !== undefined && !methods.includes(method)) {
      problems.push({ path: [...at, 'allowed_methods', index], message: `${method} is not one of the route's methods` })
    }
  })
}

export function lintCors(config: GatewayConfig): Problem[] {
  const problems: Problem[] = []
  if (config.cors !== undefined) {
    checkOwn(config.cors, ['cors'], problems)
    checkCredentials(config.cors, config.cors, ['cors'], problems)
  }
  config.routes.forEach((route, index) => {
    if (route.cors !== undefined && route.cors !== false) checkRoute(config, route.cors, route.methods, ['routes', index, 'cors'], problems)
  })
  return problems
}
