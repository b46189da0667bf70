/**
 * Request-target hygiene, before matching: anything an upstream could read
 * differently from us is refused, so the path a rule matched is byte for byte the path forwarded.
 */
import { MalformedRequest } from '../errors/oauth-errors.js'

// Percent-encodings that are equivalent to a plain character (RFC 3986 §2.3 unreserved) or that change
// the path's structure (/ \ ; NUL and other controls): refused rather than decoded.
const AMBIGUOUS_ESCAPE = /%(?:2[d-f]|3[0-9b]|4[1-9a-f]|5[0-9acf]|6[1-9a-f]|7[0-9aef]|[01][0-9a-f])/i
const BROKEN_ESCAPE = /%(?![0-9a-f]{2})/i
// Dot-segments, also with Tomcat-style path parameters (`..;x`).
const DOT_SEGMENT = /(?:^|\/)\.{1,2}(?:;[^/]*)?(?:\/|$)/
// `;` starts a path parameter that Tomcat, Jetty and Spring strip before routing (`/admin;x/secret` is
// their `/admin/secret`), so a path carrying one is read two ways: refused, as Spring's StrictHttpFirewall does.
const FORBIDDEN_CHAR = /[\\\0#;\s]/

/** Why this path would be read differently by some upstream, or undefined when it is unambiguous. */
export function pathProblem(path: string): string | undefined {
  if (path.includes('//')) return 'the path has an empty segment'
  if (FORBIDDEN_CHAR.test(path)) return 'the path has a forbidden character'
  if (path.includes('%') && (AMBIGUOUS_ESCAPE.test(path) || BROKEN_ESCAPE.test(path))) {
    return 'the path has an ambiguous percent-encoding'
  }
  if (path.includes('.') && DOT_SEGMENT.test(path)) return 'the path has a dot-segment'
  return undefined
}

/** Splits `req.url` into path and query (`?…` included, untouched), or throws InvalidRequest. */
export function splitRequestTarget(url: string): { path: string; query: string } {
  if (url.charCodeAt(0) !== 47 /* / */) throw new MalformedRequest('the request target must be origin-form (/path)')
  const q = url.indexOf('?')
  const path = q === -1 ? url : url.slice(0, q)
  const query = q === -1 ? '' : url.slice(q)
  const problem = pathProblem(path)
  if (problem) throw new MalformedRequest(problem)
  return { path, query }
}
