/**
 * The headers the upstream receives: the client's, minus hop-by-hop headers (RFC 9110 §7.6.1) and minus
 * every identity header the client may have spoofed (on every route, `auth: none` included), then ours.
 */
import type { IncomingMessage } from 'node:http'
import type { ForwardConfig } from '../config/schema.js'
import type { Principal } from '../authn/principal.js'
import { InvalidToken } from '../errors/oauth-errors.js'

export type OutgoingHeaders = Record<string, string | string[]>

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authorization', 'proxy-authenticate', 'expect', 'http2-settings', 'host']
const FORWARDED = ['forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']

export const DEFAULT_IDENTITY_HEADERS = {
  subject: 'X-Auth-Subject',
  client_id: 'X-Auth-Client-Id',
  scopes: 'X-Auth-Scopes',
  issuer: 'X-Auth-Issuer',
} as const

export interface HeaderPolicy {
  readonly removed: ReadonlySet<string>
  readonly subject: string
  readonly clientId: string
  readonly scopes: string
  readonly issuer: string
  readonly trustForwarded: boolean
  readonly tls: boolean
}

export function createHeaderPolicy(forward: ForwardConfig | undefined, tls: boolean): HeaderPolicy {
  const names = { ...DEFAULT_IDENTITY_HEADERS, ...forward?.identity_headers }
  const identity = [names.subject, names.client_id, names.scopes, names.issuer].map((name) => name.toLowerCase())
  const trustForwarded = forward?.trust_forwarded_headers ?? false
  const removed = new Set([...HOP_BY_HOP, ...identity, ...(trustForwarded ? [] : FORWARDED)])
  if (forward?.strip_authorization) removed.add('authorization')
  return {
    removed,
    subject: identity[0]!,
    clientId: identity[1]!,
    scopes: identity[2]!,
    issuer: identity[3]!,
    trustForwarded,
    tls,
  }
}

// A claim copied into a header must stay one visible-ASCII line: anything else could split or smuggle headers.
const HEADER_SAFE = /^[\x20-\x7e]*$/

function identityValue(value: string): string {
  if (!HEADER_SAFE.test(value)) throw new InvalidToken('unrepresentable_claim')
  return value
}

export function buildUpstreamHeaders(req: IncomingMessage, principal: Principal | undefined, policy: HeaderPolicy): OutgoingHeaders {
  const incoming = req.headers
  const out: OutgoingHeaders = {}
  const removed = policy.removed
  const alsoRemoved = connectionListed(incoming.connection)
  for (const name in incoming) {
    if (removed.has(name) || alsoRemoved?.has(name)) continue
    // CGI-style stacks (WSGI, Rack, PHP) read `X_Auth_Subject` as `X-Auth-Subject`: strip the look-alike too.
    if (name.includes('_') && removed.has(name.replace(/_/g, '-'))) continue
    const value = incoming[name]
    if (value !== undefined) out[name] = value
  }
  const remote = req.socket.remoteAddress ?? ''
  if (policy.trustForwarded) {
    const prior = incoming['x-forwarded-for']
    out['x-forwarded-for'] = prior ? `${prior}, ${remote}` : remote
    out['x-forwarded-proto'] ??= policy.tls ? 'https' : 'http'
    if (incoming.host !== undefined) out['x-forwarded-host'] ??= incoming.host
  } else {
    out['x-forwarded-for'] = remote
    out['x-forwarded-proto'] = policy.tls ? 'https' : 'http'
    if (incoming.host !== undefined) out['x-forwarded-host'] = incoming.host
  }
  if (principal) {
    if (principal.subject !== undefined) out[policy.subject] = identityValue(principal.subject)
    if (principal.clientId !== undefined) out[policy.clientId] = identityValue(principal.clientId)
    out[policy.scopes] = identityValue(principal.scopes.join(' '))
    out[policy.issuer] = identityValue(principal.issuer)
  }
  return out
}

const RESPONSE_HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authenticate', 'proxy-authorization'])

/**
 * Upstream response headers, as undici hands them over (name, value, name, value, … in Buffers), minus
 * hop-by-hop ones, as the flat list `writeHead` takes: names lower-cased, repeated fields kept apart.
 * Node sets its own framing.
 */
export function responseHeaderList(raw: readonly Buffer[]): string[] {
  const out: string[] = []
  let connection: string | undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString('latin1')
    const lower = name.toLowerCase()
    const value = raw[i + 1]!.toString('latin1')
    if (lower === 'connection') connection = connection === undefined ? value : `${connection},${value}`
    if (!RESPONSE_HOP_BY_HOP.has(lower)) out.push(lower, value)
  }
  const alsoRemoved = connectionListed(connection)
  if (!alsoRemoved) return out
  const kept: string[] = []
  for (let i = 0; i < out.length; i += 2) if (!alsoRemoved.has(out[i]!)) kept.push(out[i]!, out[i + 1]!)
  return kept
}

/** RFC 9110 §7.6.1: the header fields a Connection header names are hop-by-hop too. */
function connectionListed(connection: string | string[] | undefined): Set<string> | undefined {
  if (connection === undefined || connection === 'keep-alive' || connection === 'close') return undefined
  const names = (Array.isArray(connection) ? connection.join(',') : connection).toLowerCase().split(',')
  return new Set(names.map((name) => name.trim()))
}
