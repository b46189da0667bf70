/**
 * The request a decision is asked for (`decision:`), as the proxy in front describes it. Three forms, one per
 * endpoint path, and never two at once (two readings of one request are what a caller would use to have one
 * URL authorized and another served):
 *
 * - `/decide` with `X-Original-Method` and `X-Original-URL` (ingress-nginx: `scheme://host/path?query`) or
 *   `X-Original-URI` (the nginx snippet: `$request_uri`), or both when they name the same target (ingress-nginx
 *   with `auth-method`);
 * - `/decide` with `X-Forwarded-Method` and `X-Forwarded-Uri` (Traefik's and Caddy's forward auth);
 * - `/envoy/<path>`: Envoy's ext_authz HTTP service with `path_prefix: /envoy`, the original method and path as
 *   the request's own.
 *
 * Path hygiene (rules/normalize.ts) is the caller's: the target returned here is exactly what the proxy gave.
 */
import type { IncomingMessage } from 'node:http'
import { MalformedRequest, NoMatchingRoute } from '../errors/oauth-errors.js'

export interface OriginalRequest {
  readonly method: string
  /** Origin-form: `/path?query`. */
  readonly url: string
  readonly form: 'original' | 'forwarded' | 'envoy'
}

export const DECIDE_PATH = '/decide'
export const ENVOY_PREFIX = '/envoy'

/** The headers that describe the original request, in the order of {@link count}'s slots. */
const DESCRIBING = ['x-original-url', 'x-original-uri', 'x-original-method', 'x-forwarded-uri', 'x-forwarded-method'] as const
const [ORIGINAL_URL, ORIGINAL_URI, ORIGINAL_METHOD, FORWARDED_URI, FORWARDED_METHOD] = [0, 1, 2, 3, 4]

/** An HTTP method token as proxies pass them: upper-case letters and `-` (`M-SEARCH`); methods are case-sensitive. */
const METHOD = /^[A-Z][A-Z-]{0,31}$/
/**
 * `X-Original-URL`: an absolute http(s) URL whose authority is a host and port only, then the target, taken as
 * written. ingress-nginx builds it from the client's `Host`: a `?` or `#` there (nginx lets them through) must
 * not end the authority early and move the path into the query (found in review: `Host: a?` decided `/`).
 */
const ABSOLUTE_URL = /^https?:\/\/[A-Za-z0-9._~:[\]-]+(\/[\x21\x22\x24-\x7e]*)$/i

/** How many times each describing header appears (node joins repeats of unknown headers with `, `: count them raw). */
function count(req: IncomingMessage): number[] {
  const counts = [0, 0, 0, 0, 0]
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    if (name.length < 14 || name.length > 18 || (name.charCodeAt(0) | 0x20) !== 0x78 /* x */) continue
    const at = (DESCRIBING as readonly string[]).indexOf(name.toLowerCase())
    if (at !== -1) counts[at]!++
  }
  return counts
}

function method(value: string | string[] | undefined, name: string): string {
  if (typeof value !== 'string' || !METHOD.test(value)) throw new MalformedRequest(`${name} must be an upper-case HTTP method`)
  return value
}

/** A request target's characters (RFC 9112 §3.2): visible ASCII, no space; `#` never (no fragment is sent). */
const TARGET = /^\/[\x21\x22\x24-\x7e]*$/

function originForm(value: string | string[] | undefined, name: string): string {
  if (typeof value !== 'string' || !TARGET.test(value)) {
    throw new MalformedRequest(`${name} must be an origin-form request target (/path?query)`)
  }
  return value
}

/** `https://host/a?b` → `/a?b` (the target ingress-nginx sends is `$request_uri`: never empty, always from `/`). */
function fromAbsolute(value: string | string[] | undefined): string {
  const match = typeof value === 'string' ? ABSOLUTE_URL.exec(value) : null
  if (!match) throw new MalformedRequest('X-Original-URL must be an absolute http(s) URL: scheme://host[:port]/path')
  return match[1]!
}

/** The described request, or the error to answer (400 for a malformed or ambiguous description, 404 off the endpoint paths). */
export function originalRequest(req: IncomingMessage): OriginalRequest {
  const url = req.url ?? ''
  const counts = count(req)
  const repeated = counts.findIndex((n) => n > 1)
  if (repeated !== -1) throw new MalformedRequest(`more than one ${DESCRIBING[repeated]} header`)
  const headers = req.headers
  if (url.startsWith(`${ENVOY_PREFIX}/`)) {
    if (counts.some((n) => n > 0)) throw new MalformedRequest('an Envoy check request must not also carry X-Original-* or X-Forwarded-Method/Uri')
    return { method: method(req.method, 'the method'), url: url.slice(ENVOY_PREFIX.length), form: 'envoy' }
  }
  const q = url.indexOf('?')
  if ((q === -1 ? url : url.slice(0, q)) !== DECIDE_PATH) throw new NoMatchingRoute()
  const original = counts[ORIGINAL_URL]! + counts[ORIGINAL_URI]! + counts[ORIGINAL_METHOD]! > 0
  const forwarded = counts[FORWARDED_URI]! + counts[FORWARDED_METHOD]! > 0
  if (original && forwarded) throw new MalformedRequest('the request carries both X-Original-* and X-Forwarded-Method/Uri: two descriptions of one request')
  if (original) {
    const absolute = counts[ORIGINAL_URL]! > 0 ? fromAbsolute(headers['x-original-url']) : undefined
    const target = counts[ORIGINAL_URI]! > 0 ? originForm(headers['x-original-uri'], 'X-Original-URI') : absolute
    if (target === undefined) throw new MalformedRequest('X-Original-Method needs X-Original-URI or X-Original-URL')
    // ingress-nginx sends both when `auth-method` is set: they must name one target.
    if (absolute !== undefined && absolute !== target) throw new MalformedRequest('X-Original-URL and X-Original-URI name different targets')
    return { method: method(headers['x-original-method'], 'X-Original-Method'), url: target, form: 'original' }
  }
  if (forwarded) {
    return {
      method: method(headers['x-forwarded-method'], 'X-Forwarded-Method'),
      url: originForm(headers['x-forwarded-uri'], 'X-Forwarded-Uri'),
      form: 'forwarded',
    }
  }
  throw new MalformedRequest('the request names no original request: send X-Original-Method with X-Original-URI or X-Original-URL, or X-Forwarded-Method with X-Forwarded-Uri')
}
