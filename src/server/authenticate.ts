/**
 * The stages every request goes through, whoever forwards it: the route match and the token's validation and
 * authorization. Shared by the proxy (pipeline.ts) and the decision endpoint (src/decision/, issue 23).
 */
import type { IncomingMessage } from 'node:http'
import { bearerToken, rejectQueryToken, type BearerToken } from '../authn/bearer.js'
import type { Principal } from '../common/principal.js'
import { authorize } from '../authz/scopes.js'
import { GatewayError, MethodNotAllowed, MissingToken, NoMatchingRoute } from '../errors/oauth-errors.js'
import { isDpopScheme } from '../dpop/gateway.js'
import { SpanKind, SpanStatusCode, tracing, type Span } from '../tracing/tracing.js'
import type { CompiledRule } from '../rules/compile.js'
import { allowedMethods, matchSplitRule } from '../rules/match.js'
import type { GatewayRuntime } from './runtime.js'

/** The rule for this method and path (split once by the caller: claim conditions read its segments too). */
export function matchOrThrow(rules: readonly CompiledRule[], method: string, path: string, segments: readonly string[]): CompiledRule {
  const rule = matchSplitRule(rules, method, path, segments)
  if (rule) return rule
  const allow = allowedMethods(rules, path)
  throw allow.length > 0 ? new MethodNotAllowed(allow) : new NoMatchingRoute()
}

/**
 * RFC 6750 §2.1 header only; a token in the query or the form body as well is invalid_request (§3.1).
 * Synchronous on a verified-JWT cache hit (the hot path awaits nothing), a promise otherwise; throws or
 * rejects with the error to answer. `check` authorizes the token: the route's rules, or on an MCP POST only
 * its audience (the rest is checked once the message is read, src/mcp/).
 */
export function authenticate(rt: GatewayRuntime, req: IncomingMessage, rule: CompiledRule, path: string, query: string,
  segments: readonly string[], check: typeof authorize = authorize, decision = false): Principal | undefined | Promise<Principal> {
  if (rule.auth === 'none') return undefined
  rejectQueryToken(query)
  const header = req.headers.authorization
  // RFC 9449 §7: `DPoP <token>` with a proof (issue 20); on a route with `dpop: off` it is any other scheme.
  if (header !== undefined && rule.dpop !== 'off' && isDpopScheme(header)) {
    return authenticateDpop(rt, req, rule, path, segments, check, rt.dpop.token(header, rt.maxTokenSize), decision)
  }
  const token = bearerToken(req, rt.maxTokenSize)
  if (token === undefined) {
    if (rule.auth === 'optional') return undefined
    throw rule.dpop === 'required' ? new MissingToken(rt.dpop.settings.algs) : new MissingToken()
  }
  const found = tracing() === null ? rt.authenticator.authenticate(token.token, token.hash, token) : authenticateTraced(rt, token)
  if (found instanceof Promise) {
    return found.then((principal) => {
      if (principal.jkt !== undefined || rule.dpop === 'required' || rt.dpop.issuerRequires) rt.dpop.refuseBearer(principal, rule.dpop)
      check(principal, rule, req.headers, segments)
      return principal
    })
  }
  // A token bound to a key is no Bearer token (RFC 9449 §7.2); one test on the hot path when nothing requires DPoP.
  if (found.jkt !== undefined || rule.dpop === 'required' || rt.dpop.issuerRequires) rt.dpop.refuseBearer(found, rule.dpop)
  check(found, rule, req.headers, segments)
  return found
}

/**
 * `rt.authenticator.authenticate` in an `authenticate` span (issue 22): a cache hit is answered at once
 * (`portcullis.cache.hit: true`); a miss's JWKS fetch or introspection call are its children.
 */
function authenticateTraced(rt: GatewayRuntime, token: BearerToken): Principal | Promise<Principal> {
  const tracer = tracing()!
  const { span, context } = tracer.startChild('authenticate', SpanKind.INTERNAL)
  const end = (error?: unknown) => {
    if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof GatewayError ? error.code : 'error' })
    span.end()
  }
  let found: Principal | Promise<Principal>
  try {
    found = tracer.within(context, () => rt.authenticator.authenticate(token.token, token.hash, token))
  } catch (error) {
    span.setAttribute('portcullis.cache.hit', false)
    end(error)
    throw error
  }
  span.setAttribute('portcullis.cache.hit', !(found instanceof Promise))
  if (!(found instanceof Promise)) {
    end()
    return found
  }
  return found.then((principal) => { end(); return principal }, (error: unknown) => { end(error); throw error })
}

/** The server span's name and route (semantic conventions: `{method} {http.route}`). */
export function nameSpan(span: Span, req: IncomingMessage, rule: CompiledRule): void {
  span.updateName(`${req.method ?? 'HTTP'} ${rule.path}`)
  span.setAttribute('http.route', rule.path)
  span.setAttribute('portcullis.route', rule.id)
}

async function authenticateDpop(rt: GatewayRuntime, req: IncomingMessage, rule: CompiledRule, path: string,
  segments: readonly string[], check: typeof authorize, token: string, decision: boolean): Promise<Principal> {
  const principal = await rt.authenticator.authenticate(token)
  await rt.dpop.verify(req, path, token, principal, rule.dpop, decision)
  check(principal, rule, req.headers, segments)
  return principal
}
