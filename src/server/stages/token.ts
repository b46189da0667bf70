/**
 * The token: authenticate (who is calling), bind (proof of possession, RFC 9449), authorize (may they do this
 * here: the route's resource, scopes and claim conditions). Synchronous on a verified-JWT cache hit: the hot
 * path awaits nothing.
 */
import { bearerToken, rejectQueryToken, type BearerToken } from '../../authn/bearer.js'
import { requireBoundCertificate } from '../../authn/certificate-binding.js'
import type { Principal } from '../../common/principal.js'
import { authorize as authorizeRoute, requireAudience } from '../../authz/scopes.js'
import { isDpopScheme } from '../../dpop/gateway.js'
import { GatewayError, MissingToken } from '../../errors/oauth-errors.js'
import { SpanKind, SpanStatusCode, tracing } from '../../tracing/tracing.js'
import type { Exchange } from '../exchange.js'
import type { GatewayRuntime } from '../runtime.js'

/**
 * Authenticate: the credential of RFC 6750 §2.1 (the `Authorization` header only; a token in the query as well
 * is invalid_request, §3.1), or RFC 9449 §7's `DPoP <token>`, to the issuer it names. No token: 401, unless the
 * route's `auth` is `optional` or `none`.
 */
export function authenticate(ex: Exchange): Promise<void> | undefined {
  const rule = ex.rule
  if (rule.auth === 'none' || ex.preflight) return undefined
  rejectQueryToken(ex.query)
  const rt = ex.rt
  const header = ex.req.headers.authorization
  // On a route with `dpop: off`, `DPoP` is any other scheme.
  if (header !== undefined && rule.dpop !== 'off' && isDpopScheme(header)) {
    const token = rt.dpop.token(header, rt.maxTokenSize)
    ex.dpopToken = token
    return Promise.resolve(rt.authenticator.authenticate(token)).then((principal) => { ex.principal = principal })
  }
  const token = bearerToken(ex.req, rt.maxTokenSize)
  if (token === undefined) {
    if (rule.auth === 'optional') return undefined
    throw rule.dpop === 'required' ? new MissingToken(rt.dpop.settings.algs) : new MissingToken()
  }
  const found = tracing() === null ? rt.authenticator.authenticate(token.token, token.hash) : authenticateTraced(rt, token)
  if (found instanceof Promise) return found.then((principal) => { ex.principal = principal })
  ex.principal = found
  return undefined
}

/**
 * `rt.authenticator.authenticate` in an `authenticate` span: a cache hit is answered at once
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
    found = tracer.within(context, () => rt.authenticator.authenticate(token.token, token.hash))
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

/**
 * Bind: proof of possession of what the token is bound to. A certificate-bound token (`cnf.x5t#S256`) only on a
 * connection that presented that certificate (RFC 8705 §3); a `DPoP` request's proof, checked against the
 * token's `cnf.jkt` (RFC 9449 §4.3, §7.1); a token bound to a key is no Bearer token (§7.2), and a route or
 * issuer with `dpop: required` takes bound tokens only.
 */
export function bind(ex: Exchange): Promise<void> | undefined {
  const principal = ex.principal
  if (principal === undefined) return undefined
  const rt = ex.rt
  if (principal.x5t !== undefined) requireBoundCertificate(ex.req, principal.x5t, ex.described)
  if (ex.dpopToken !== undefined) return rt.dpop.verify(ex, ex.dpopToken, principal)
  // One test on the hot path when nothing requires DPoP.
  if (principal.jkt !== undefined || ex.rule.dpop === 'required' || rt.dpop.issuerRequires) rt.dpop.refuseBearer(principal, ex.rule.dpop)
  return undefined
}

/**
 * Authorize: on a resource's routes only a token issued for it (RFC 8707), then the route's scopes (403
 * insufficient_scope) and claim conditions (403 access_denied), which may read the path's parameters and the
 * request's headers. An MCP message has its audience checked here and the rest once it is read (src/mcp/).
 */
export function authorize(ex: Exchange): undefined {
  const principal = ex.principal
  if (principal === undefined) return undefined
  if (ex.mcpMessage) requireAudience(principal, ex.rule)
  else authorizeRoute(principal, ex.rule, ex.req.headers, ex.segments)
  return undefined
}
