/**
 * Request-target hygiene, before matching (ARCHITECTURE "Normalize"): anything an upstream could read
 * differently from us is refused, so the path a rule matched is byte for byte the path forwarded.
 */
import { InvalidRequest } from '../errors/oauth-errors.js'

// Percent-encodings that are equivalent to a plain character (RFC 3986 §2.3 unreserved) or that change
// the path's structure (/ \ NUL and other controls): refused rather than decoded.
const AMBIGUOUS_ESCAPE = /%(?:2[d-f]|3[0-9]|4[1-9a-f]|5[0-9acf]|6[1-9a-f]|7[0-9aef]|[01][0-9a-f])/i
const BROKEN_ESCAPE = /%(?![0-9a-f]{2})/i
// Dot-segments, also with Tomcat-style path parameters (`..;x`).
const DOT_SEGMENT = /(?:^|\/)\.{1,2}(?:;[^/]*)?(?:\/|$)/
const FORBIDDEN_CHAR = /[\\\0#\s]/

/** Splits `req.url` into path and query (`?…` included, untouched), or throws InvalidRequest. */
export function splitRequestTarget(url: string): { path: string; query: string } {
  if (url.charCodeAt(0) !== 47 /* / */) throw new InvalidRequest('the request target must be origin-form (/path)')
  const q = url.indexOf('?')
  const path = q === -1 ? url : url.slice(0, q)
  const query = q === -1 ? '' : url.slice(q)
  if (path.includes('//')) throw new InvalidRequest('the path has an empty segment')
  if (FORBIDDEN_CHAR.test(path)) throw new InvalidRequest('the path has a forbidden character')
  if (path.includes('%') && (AMBIGUOUS_ESCAPE.test(path) || BROKEN_ESCAPE.test(path))) {
    throw new InvalidRequest('the path has an ambiguous percent-encoding')
  }
  if (path.includes('.') && DOT_SEGMENT.test(path)) throw new InvalidRequest('the path has a dot-segment')
  return { path, query }
}
