/**
 * The first stages of a proxied request: normalize the target, match the route, answer CORS preflights, and
 * refuse what the route's limits refuse before any token is looked at.
 */
import { MalformedRequest, MethodNotAllowed, NoMatchingRoute, RequestTooLarge } from '../../errors/oauth-errors.js'
import { corsAnswer } from '../../cors/policy.js'
import { answerPreflight, isPreflight } from '../../cors/preflight.js'
import { hasBody } from '../../forward/request-body.js'
import { refuseForeignOrigin } from '../../mcp/origin.js'
import type { CompiledRule } from '../../rules/compile.js'
import { allowedMethods, matchSplitRule, type RouteIndex } from '../../rules/match.js'
import { splitRequestTarget } from '../../rules/normalize.js'
import { splitPath } from '../../rules/segments.js'
import type { Exchange } from '../exchange.js'
import { requestHeadProblem } from '../request-head.js'
import { serveResourceMetadata } from '../resource-metadata.js'

/** The rule for this method and path (split once: claim conditions read its segments too), or 404 / 405. */
export function matchOrThrow(routes: RouteIndex, method: string, path: string, segments: readonly string[]): CompiledRule {
  const rule = matchSplitRule(routes, method, path, segments)
  if (rule) return rule
  const allow = allowedMethods(routes, path, segments)
  throw allow.length > 0 ? new MethodNotAllowed(allow) : new NoMatchingRoute()
}

/**
 * Normalize: refuse a head the parser let through but a gateway must not (RFC 9112), and a target that can be
 * read two ways (src/rules/normalize.ts); the path matched is the path forwarded. RFC 9728 metadata documents
 * are answered here, before any route (none can shadow one).
 */
export function normalize(ex: Exchange): undefined {
  const problem = requestHeadProblem(ex.req)
  if (problem) throw problem
  readTarget(ex, ex.req.url ?? '')
  const documents = ex.rt.resourceMetadata
  if (documents !== null && serveResourceMetadata(documents, ex.req, ex.res!, ex.path)) {
    ex.route = '(resource-metadata)'
    ex.decision = 'answered'
    ex.answered = true
  }
  return undefined
}

/** The path (refused when it can be read two ways: src/rules/normalize.ts), its segments and the query of `target`. */
export function readTarget(ex: Exchange, target: string): void {
  const { path, query } = splitRequestTarget(target)
  ex.path = path
  ex.query = query
  ex.segments = splitPath(path)
}

/**
 * Match: the most specific route for the method and path. A CORS preflight (where `cors` is configured) is
 * matched by the method it announces: its answer is the route the actual request would meet.
 */
export function match(ex: Exchange): undefined {
  const rt = ex.rt
  const req = ex.req
  const preflight = rt.cors !== null && ex.mode === 'proxy' && req.headers.origin !== undefined && isPreflight(req)
  const method = preflight ? req.headers['access-control-request-method'] as string : req.method ?? 'GET'
  const rule = matchOrThrow(rt.routes, method, ex.path, ex.segments)
  ex.preflight = preflight
  if (preflight) {
    ex.rule = rule
    ex.route = rule.id
  } else {
    enter(ex, rule)
  }
  return undefined
}

/** The request is on `rule`: its id for the log and metrics, the span's name, its resource's challenge. */
function enter(ex: Exchange, rule: CompiledRule): void {
  ex.rule = rule
  ex.route = rule.id
  const span = ex.span
  if (span !== undefined) {
    // Semantic conventions: `{method} {http.route}`.
    span.updateName(`${ex.req.method ?? 'HTTP'} ${rule.path}`)
    span.setAttribute('http.route', rule.path)
    span.setAttribute('portcullis.route', rule.id)
  }
  if (rule.challenge !== null) ex.resourceMetadata = rule.challenge
}

/**
 * CORS (`cors`), where configured: a preflight is answered for its route before authentication, forwarded
 * unauthenticated to a `cors: { upstream: true }` route only, and matched as an ordinary OPTIONS under
 * `cors: false`. Every other request from an origin gets its route's CORS headers, whatever answers it.
 */
export function cors(ex: Exchange): undefined {
  if (ex.rt.cors === null) return undefined
  const req = ex.req
  const origin = req.headers.origin
  if (origin === undefined) return undefined
  if (ex.preflight) {
    // `match` found the route of the method the preflight announces.
    const target = ex.rule
    ex.cors = null
    if (target.cors?.upstream) return undefined
    if (target.cors !== null) {
      ex.decision = 'answered'
      ex.answered = true
      return answerPreflight(target.cors, req, ex.res!, origin)
    }
    // `cors: false` on the announced route: an OPTIONS request like any other.
    ex.preflight = false
    enter(ex, matchOrThrow(ex.rt.routes, req.method ?? 'GET', ex.path, ex.segments))
    return undefined
  }
  ex.cors = corsAnswer(ex.rule.cors, origin, req.method)
  return undefined
}

/**
 * What the route refuses before the token is looked at: a preflight with a body, a declared length over
 * `max_body_size` (it costs nothing to refuse), and on an `mcp` route a foreign `Origin` (MCP: DNS rebinding);
 * marks an MCP message.
 */
export function admit(ex: Exchange): undefined {
  const req = ex.req
  if (ex.preflight) {
    // Fetch §4.8: a CORS preflight has no body. Forwarded unauthenticated (`cors.upstream`), one must not carry any.
    if (hasBody(req)) throw new MalformedRequest('a CORS preflight has no body')
    return undefined
  }
  const rule = ex.rule
  if (Number(req.headers['content-length']) > rule.maxBodySize) throw new RequestTooLarge(rule.maxBodySize)
  if (rule.mcp !== null) {
    refuseForeignOrigin(rule, req)
    ex.mcpMessage = req.method === 'POST' || hasBody(req)
  }
  return undefined
}
