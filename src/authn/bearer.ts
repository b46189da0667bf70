/** RFC 6750 §2.1: the Bearer token from the one Authorization header, or nothing. */
import type { IncomingMessage } from 'node:http'
import { InvalidRequest } from '../errors/oauth-errors.js'

// token68 (RFC 7235 §2.1), which RFC 6750's b64token is.
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i
const SCHEME = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?: |$)/

/**
 * Returns the token, `undefined` when the request carries no Bearer credentials (no header, or another
 * scheme: RFC 6750 §3.1 treats both as "no authentication information"), or throws InvalidRequest.
 */
export function extractBearerToken(req: IncomingMessage, maxTokenSize: number): string | undefined {
  const header = req.headers.authorization
  if (header === undefined) return undefined
  // Node keeps only the first Authorization header; the raw list shows a second one.
  let count = 0
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    if (name.length === 13 && name.toLowerCase() === 'authorization') count++
  }
  if (count > 1) throw new InvalidRequest('more than one Authorization header')
  const scheme = SCHEME.exec(header)
  if (!scheme) throw new InvalidRequest('malformed Authorization header')
  if (scheme[1]!.toLowerCase() !== 'bearer') return undefined
  // The header itself is bounded by the server's header limit, so the (linear) match is cheap; the limit
  // applies to the token alone, not to the header with its scheme and spaces.
  const match = BEARER.exec(header)
  if (!match) throw new InvalidRequest('malformed Bearer credentials')
  const token = match[1]!
  if (token.length > maxTokenSize) throw new InvalidRequest('the access token is too large')
  return token
}

/**
 * RFC 6750 §2.3: a token in the URI is refused outright; §3.1 names two tokens invalid_request.
 * `query` is `?…` or empty. The name is compared decoded (`access%5Ftoken` is the same parameter to an
 * upstream that decodes it), so any query with a `%` is parsed too.
 */
export function rejectQueryToken(query: string): void {
  if (query.length > 1 && (query.includes('access_token') || query.includes('%')) && new URLSearchParams(query).has('access_token')) {
    throw new InvalidRequest('access tokens in the query string are not accepted; use the Authorization header')
  }
}
