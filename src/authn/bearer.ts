/** RFC 6750 §2.1: the Bearer token from the one Authorization header, or nothing. */
import type { IncomingMessage } from 'node:http'
import { InvalidRequest } from '../errors/oauth-errors.js'
import { tokenHash } from './token-cache.js'

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
  refuseSecondHeader(req)
  return bearerTokenOf(header, maxTokenSize)
}

/** Node keeps only the first Authorization header; the raw list shows a second one. */
function refuseSecondHeader(req: IncomingMessage): void {
  let count = 0
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    if (name.length === 13 && name.toLowerCase() === 'authorization') count++
  }
  if (count > 1) throw new InvalidRequest('more than one Authorization header')
}

/** The token of one Authorization header (see {@link extractBearerToken}). */
function bearerTokenOf(header: string, maxTokenSize: number): string | undefined {
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
 * A request's Bearer token, and its hash (the key of the JWT cache, token-cache.ts); kept on its connection, the
 * same hash string serves its next requests, and a string's hash code is computed once: found by identity.
 */
export interface BearerToken {
  /** The Authorization header it came in, exactly as sent. */
  readonly header: string
  readonly token: string
  /** `tokenHash(token)` */
  readonly hash: string
}

/** The last Bearer token read on a connection. */
const LAST_BEARER = Symbol('portcullis.lastBearer')
/**
 * Longer headers are not kept: an idle connection holds at most this much more memory for it (a JWT is
 * rarely over 2 KiB; `server.max_token_size` may allow 8 KiB or more).
 */
const KEPT_HEADER_MAX = 4096
type ConnectionWithBearer = { [LAST_BEARER]?: BearerToken | undefined }

/**
 * Gives a connection its (empty) kept-Bearer slot as it is accepted, before node's HTTP code first handles the
 * socket (listener.ts). Made on the first request instead, the slot changed the socket's hidden class (V8's map)
 * in the middle of its life, and node's and undici's stream code, which handles every socket, then saw one more
 * shape of socket: about 1 to 1.5 % of a cache hit's CPU.
 */
export function giveBearerSlot(socket: object): void {
  (socket as ConnectionWithBearer)[LAST_BEARER] = undefined
}

/** Whether `socket` has its kept-Bearer slot (for tests). */
export function hasBearerSlot(socket: object): boolean {
  return LAST_BEARER in socket
}

/**
 * {@link extractBearerToken}, with the token's hash. A client sends the same Authorization header on each
 * request of a keep-alive connection, so the connection keeps the last one read, with its token and hash:
 * a request whose header is that very text (compared in full) skips the parse and the SHA-256, about 2 µs of
 * the cache-hit path's CPU. Nothing else is skipped: the second-header check and the size limit (a reload
 * may lower it) run on every request, and the token is validated as always. The kept header lives as long as
 * its connection, on that connection only, and only up to 4 KiB.
 */
export function bearerToken(req: IncomingMessage, maxTokenSize: number): BearerToken | undefined {
  const header = req.headers.authorization
  if (header === undefined) return undefined
  refuseSecondHeader(req)
  const connection = req.socket as unknown as ConnectionWithBearer | null
  const last = connection?.[LAST_BEARER]
  if (last !== undefined && last.header === header) {
    if (last.token.length > maxTokenSize) throw new InvalidRequest('the access token is too large')
    return last
  }
  const token = bearerTokenOf(header, maxTokenSize)
  if (token === undefined) return undefined
  const found: BearerToken = { header, token, hash: tokenHash(token) }
  if (connection && header.length <= KEPT_HEADER_MAX) connection[LAST_BEARER] = found
  return found
}

/**
 * Whether a query or form names `access_token` the way some upstream reads it: `;` separates parameters as
 * `&` does (Python's parse_qs before 3.9.2, Perl's CGI, Java servlet containers' path-parameter kin), names
 * are compared percent-decoded, and PHP reads ` `, `.` and `[` in a name as `_` (`access.token` is its
 * `$_GET['access_token']`).
 */
export function namesAccessToken(parameters: string): boolean {
  for (const name of new URLSearchParams(parameters.replaceAll(';', '&')).keys()) {
    if (name.length === 12 && name.replace(/[ .[]/g, '_') === 'access_token') return true
  }
  return false
}

/**
 * RFC 6750 §2.3: a token in the URI is refused outright; §3.1 names two tokens invalid_request.
 * `query` is `?…` or empty. Parsed only when it could name the parameter (`%` may spell it encoded).
 */
export function rejectQueryToken(query: string): void {
  if (query.length > 1 && (query.includes('access') || query.includes('%')) && namesAccessToken(query.slice(1))) {
    throw new InvalidRequest('access tokens in the query string are not accepted; use the Authorization header')
  }
}
