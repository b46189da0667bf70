/**
 * The headers the upstream receives: the client's, minus hop-by-hop headers (RFC 9110 §7.6.1), minus every
 * identity header the client may have spoofed (on every route, `auth: none` included), minus forwarding and
 * method or URL override headers, minus the gateway's own cookies; then ours.
 */
import type { IncomingMessage } from 'node:http'
import type { Principal } from '../common/principal.js'
import type { ClaimHeader } from '../claims/headers.js'
import { readClaim } from '../claims/path.js'
import { GATEWAY_COOKIES } from '../common/token-formats.js'
import { InvalidToken } from '../errors/oauth-errors.js'
import { connectionListed, percentEncoded } from '../common/header-names.js'
import { peerCertificate } from '../common/client-certificate.js'
import type { HeaderPolicy } from './header-policy.js'
export { DEFAULT_IDENTITY_HEADERS, reservedHeaderNames, STRIPPED_HEADERS } from '../common/header-names.js'

export type OutgoingHeaders = Record<string, string | string[]>
/**
 * The headers of a forwarded request, as the flat list undici takes (`[name, value, name, value, …]`, names
 * lower-case): cheaper for undici to read than an object's keys (about 2 % of a cache hit's CPU). A
 * name appears once, except one the client sent as several fields node keeps apart (`set-cookie`).
 */
export type HeaderList = string[]

/**
 * A claim copied into an identity header must read as one value to every parser: visible ASCII with inner
 * spaces only, not empty, no space at either end (RFC 9110 §5.5 parsers trim it: `" admin "` would be `admin`),
 * no `,` (a list separator: `alice, admin` is two values to many) and no `"` (a quoted string is its content
 * to a structured-field parser). Anything else refuses the token rather than being copied or rewritten.
 */
const IDENTITY_VALUE = /^[\x21\x23-\x2b\x2d-\x7e](?:[\x20\x21\x23-\x2b\x2d-\x7e]*[\x21\x23-\x2b\x2d-\x7e])?$/

function identityValue(value: string): string {
  if (!IDENTITY_VALUE.test(value)) throw new InvalidToken('unrepresentable_claim')
  return value
}

/**
 * A claim as a header value: a string, a number or a boolean as written; an array as its members
 * joined by ", " (RFC 9110 §5.6.1 list syntax), each member a string, number or boolean; undefined (no
 * header) for a missing claim, null or an empty array. Each value or member must be an identity value (see
 * above), and an object is never written: either refuses the token (401), as an identity header does.
 */
export function claimHeaderValue(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined
  if (!Array.isArray(value)) return identityValue(scalarText(value))
  if (value.length === 0) return undefined
  let out = identityValue(scalarText(value[0]))
  for (let i = 1; i < value.length; i++) out += ', ' + identityValue(scalarText(value[i]))
  return out
}

function scalarText(value: unknown): string {
  if (typeof value === 'string') return value
  if ((typeof value === 'number' && Number.isFinite(value)) || typeof value === 'boolean') return String(value)
  throw new InvalidToken('unrepresentable_claim')
}

function setClaimHeaders(out: OutgoingHeaders, claims: Readonly<Record<string, unknown>> | undefined, headers: readonly ClaimHeader[]): void {
  for (let i = 0; i < headers.length; i++) {
    const header = headers[i]!
    const value = claimHeaderValue(readClaim(claims, header.path))
    if (value !== undefined) out[header.name] = value
  }
}

/** The scopes, space-separated; each one an identity value (no space inside, by the split). None: empty. */
function scopesValue(scopes: readonly string[]): string {
  const value = scopes.join(' ')
  return value === '' ? value : identityValue(value)
}

/** A principal's identity header values: each one an identity value (checked), the scopes joined. */
interface IdentityValues {
  readonly subject: string | undefined
  readonly clientId: string | undefined
  readonly scopes: string
  readonly issuer: string
  /** The four values' length together (what `forward.max_identity_header_size` counts besides names and claims). */
  readonly bytes: number
}

/**
 * The identity values of the principals forwarded, made once per principal: a token cache hands out the same
 * principal on every hit, so its values are checked and joined on its first request only (about 0.2 µs a
 * request otherwise). Weak: an entry goes with its principal (the cache's bound is theirs). A principal whose
 * claims no header can carry is not kept, and is refused on every request as before.
 */
const identityValues = new WeakMap<Principal, IdentityValues>()

function identityValuesOf(principal: Principal): IdentityValues {
  let values = identityValues.get(principal)
  if (values === undefined) {
    const subject = principal.subject === undefined ? undefined : identityValue(principal.subject)
    const clientId = principal.clientId === undefined ? undefined : identityValue(principal.clientId)
    const scopes = scopesValue(principal.scopes)
    const issuer = identityValue(principal.issuer)
    values = { subject, clientId, scopes, issuer, bytes: (subject?.length ?? 0) + (clientId?.length ?? 0) + scopes.length + issuer.length }
    identityValues.set(principal, values)
  }
  return values
}

/** The client's cookies without the gateway's own (the authorization server's session and CSRF secret). */
function withoutGatewayCookies(cookie: string): string | undefined {
  if (!cookie.includes('portcullis_')) return cookie
  const kept = cookie.split(';').filter((pair) => {
    const eq = pair.indexOf('=')
    return !GATEWAY_COOKIES.has((eq === -1 ? pair : pair.slice(0, eq)).trim())
  })
  return kept.length === 0 ? undefined : kept.map((pair) => pair.trim()).join('; ')
}

export function buildUpstreamHeaders(req: IncomingMessage, principal: Principal | undefined, policy: HeaderPolicy,
  routeClaimHeaders: readonly ClaimHeader[] | null = null): HeaderList {
  const incoming = req.headers
  const out: HeaderList = []
  const removed = policy.removed
  const trusted = policy.trustForwarded
  const alsoRemoved = connectionListed(incoming.connection)
  for (const name in incoming) {
    if (removed.has(name) || alsoRemoved?.has(name)) continue
    // HTTP/2's pseudo-headers (`:path`, `:authority`, …) are the request line, not fields: the upstream gets its own.
    if (name.charCodeAt(0) === 58) continue
    // CGI-style stacks (WSGI, Rack, PHP) read `X_Auth_Subject` as `X-Auth-Subject`: strip the look-alike too.
    if (name.includes('_') && removed.has(name.replace(/_/g, '-'))) continue
    // Trusted, the client's X-Forwarded-For is extended below.
    if (trusted && name === 'x-forwarded-for') continue
    const value = incoming[name]
    if (typeof value === 'string') {
      if (name !== 'cookie') out.push(name, value)
      else {
        const kept = withoutGatewayCookies(value)
        if (kept !== undefined) out.push(name, kept)
      }
    } else if (value !== undefined) {
      for (const item of value) out.push(name, item)
    }
  }
  const socket = req.socket
  const remote = socket.remoteAddress ?? ''
  // RFC 9113 §8.3.1: an HTTP/2 request names its host in `:authority` (the upstream gets its own Host either way).
  const host = incoming.host ?? (incoming[':authority'] as string | undefined)
  if (trusted) {
    // A trusted load balancer's values are kept (those the client's Connection header did not name); ours otherwise.
    const prior = incoming['x-forwarded-for']
    out.push('x-forwarded-for', prior ? `${prior}, ${remote}` : remote)
    if (!listHas(out, 'x-forwarded-proto')) out.push('x-forwarded-proto', policy.tls ? 'https' : 'http')
    if (host !== undefined && !listHas(out, 'x-forwarded-host')) out.push('x-forwarded-host', host)
    if (!listHas(out, 'x-forwarded-port')) out.push('x-forwarded-port', String(socket.localPort))
    if (!listHas(out, 'x-real-ip')) out.push('x-real-ip', remote)
  } else {
    out.push('x-forwarded-for', remote, 'x-forwarded-proto', policy.tls ? 'https' : 'http')
    if (host !== undefined) out.push('x-forwarded-host', host)
    out.push('x-forwarded-port', String(socket.localPort), 'x-real-ip', remote)
  }
  if (principal) {
    pushIdentityHeaders(out, principal, policy, routeClaimHeaders)
    // RFC 8705: the subject of the certificate the bind stage matched, where the operator asks for it.
    if (principal.x5t !== undefined && policy.clientCertificate !== null) {
      const peer = peerCertificate(socket)
      if (peer !== undefined) out.push(policy.clientCertificate, percentEncoded(peer.subject))
    }
  }
  return out
}

function listHas(list: HeaderList, name: string): boolean {
  for (let i = 0; i < list.length; i += 2) if (list[i] === name) return true
  return false
}

/** Sets `name` in `list` to `value`: the first field of that name replaced and any other removed, or added. */
export function setInList(list: HeaderList, name: string, value: string): void {
  let found = false
  for (let i = 0; i < list.length; i += 2) {
    if (list[i] !== name) continue
    if (!found) {
      found = true
      list[i + 1] = value
    } else {
      list.splice(i, 2)
      i -= 2
    }
  }
  if (!found) list.push(name, value)
}

/** {@link setIdentityHeaders} for a forwarded request's list (no name in it is an identity or claim header). */
function pushIdentityHeaders(out: HeaderList, principal: Principal, policy: HeaderPolicy, routeClaimHeaders: readonly ClaimHeader[] | null): void {
  const values = identityValuesOf(principal)
  const claims = claimHeadersOf(principal, policy, routeClaimHeaders)
  refuseOversized(values, claims, policy)
  if (values.subject !== undefined) out.push(policy.subject, values.subject)
  if (values.clientId !== undefined) out.push(policy.clientId, values.clientId)
  out.push(policy.scopes, values.scopes, policy.issuer, values.issuer)
  if (claims !== undefined) for (const name in claims) out.push(name, claims[name] as string)
}

/**
 * `forward.max_identity_header_size`: the identity and claim headers together, names and values, at most that
 * many bytes (5,000 groups would otherwise be a 60 KB header no upstream reads): the token is refused (401,
 * logged `identity_headers_too_large`), never forwarded with less.
 */
function refuseOversized(values: IdentityValues, claims: OutgoingHeaders | undefined, policy: HeaderPolicy): void {
  let bytes = policy.identityNameBytes + values.bytes
  if (claims !== undefined) for (const name in claims) bytes += name.length + (claims[name] as string).length
  if (bytes > policy.maxIdentityBytes) {
    throw new InvalidToken(`identity_headers_too_large: ${bytes} bytes, more than forward.max_identity_header_size (${policy.maxIdentityBytes})`,
      undefined, 'bad_claim')
  }
}

/** The claim headers of `principal`: the issuer's mapping, then the route's (a header both name is the route's). */
function claimHeadersOf(principal: Principal, policy: HeaderPolicy, routeClaimHeaders: readonly ClaimHeader[] | null): OutgoingHeaders | undefined {
  const byIssuer = policy.issuerClaimHeaders?.get(principal.issuer)
  if (!byIssuer && !routeClaimHeaders) return undefined
  const claims: OutgoingHeaders = {}
  if (byIssuer) setClaimHeaders(claims, principal.claims, byIssuer)
  if (routeClaimHeaders) setClaimHeaders(claims, principal.claims, routeClaimHeaders)
  return claims
}

/**
 * The identity headers (and claim headers) of `principal` into `out`: what the upstream receives, and what the
 * decision endpoint answers for the proxy in front to copy upstream. Throws InvalidToken (401) for a
 * claim no header can carry, and for headers over `forward.max_identity_header_size`.
 */
export function setIdentityHeaders(out: OutgoingHeaders, principal: Principal, policy: HeaderPolicy,
  routeClaimHeaders: readonly ClaimHeader[] | null): void {
  const values = identityValuesOf(principal)
  const claims = claimHeadersOf(principal, policy, routeClaimHeaders)
  refuseOversized(values, claims, policy)
  if (values.subject !== undefined) out[policy.subject] = values.subject
  if (values.clientId !== undefined) out[policy.clientId] = values.clientId
  out[policy.scopes] = values.scopes
  out[policy.issuer] = values.issuer
  if (claims !== undefined) Object.assign(out, claims)
}

/** The strings of one field at a time (field-strings.ts): responseHeaderList runs to the end before the next call. */
