/**
 * A CORS preflight (Fetch §4.8: `OPTIONS` with `Origin` and `Access-Control-Request-Method`), answered by the
 * gateway before authentication (it carries no credentials) for the route the actual request would meet. It is
 * never forwarded, except to a route whose upstream answers CORS itself (`cors: { upstream: true }`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { GatewayError } from '../errors/oauth-errors.js'
import { allowedOrigin, type CorsPolicy } from './policy.js'

/** The caches' key for a preflight answer: it depends on all three. */
const PREFLIGHT_VARY = 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers'
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/**
 * A preflight the route's policy does not allow (origin, method or a requested header): 403, with no CORS
 * header, so the browser never sends the request. Which one: the log's reason only.
 */
export class CorsRefused extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 403
  constructor(detail: string) { super('this cross-origin request is not allowed', { detail }) }
}

/** Whether this request is a preflight rather than an ordinary `OPTIONS` (which is matched and authenticated as any). */
export function isPreflight(req: IncomingMessage): boolean {
  return req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined
}

/** The requested headers, checked against the policy: its `Access-Control-Allow-Headers`, or throws. */
function allowHeaders(policy: CorsPolicy, requested: string | undefined): string {
  if (requested === undefined) return policy.allowHeaders
  const names: string[] = []
  for (const part of requested.split(',')) {
    const name = part.trim().toLowerCase()
    if (name === '') continue
    if (!HEADER_NAME.test(name)) throw new CorsRefused('cors_header_not_allowed: a malformed header name')
    if (!policy.anyHeader && !policy.headers.has(name)) throw new CorsRefused(`cors_header_not_allowed: ${name}`)
    names.push(name)
  }
  // `*` alone would not cover Authorization (Fetch §3.2.3): name back what was asked, each name checked above.
  return policy.anyHeader && names.length > 0 ? names.join(', ') : policy.allowHeaders
}

/** Answers 204 with the policy's headers, or throws {@link CorsRefused}. */
export function answerPreflight(policy: CorsPolicy, req: IncomingMessage, res: ServerResponse, origin: string): undefined {
  const method = req.headers['access-control-request-method'] as string
  const allowOrigin = allowedOrigin(policy, origin)
  if (allowOrigin === undefined) throw new CorsRefused('cors_origin_not_allowed')
  if (!policy.methods.has(method)) throw new CorsRefused(`cors_method_not_allowed: ${method}`)
  const requested = req.headers['access-control-request-headers']
  const headers: Record<string, string> = {
    'access-control-allow-origin': allowOrigin,
    'access-control-allow-methods': policy.allowMethods,
    'access-control-allow-headers': allowHeaders(policy, requested),
    'access-control-max-age': policy.maxAge,
    vary: PREFLIGHT_VARY,
  }
  if (policy.credentials) headers['access-control-allow-credentials'] = 'true'
  res.writeHead(204, headers)
  res.end()
  return undefined
}
