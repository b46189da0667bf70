/**
 * Header names both sides of the gateway reason about: hop-by-hop (RFC 9110 §7.6.1), forwarding and override
 * headers, the identity headers (`forward.identity_headers`), and the names a claim header may not take.
 */
import type { ForwardConfig } from '../config/schema.js'

export const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authorization', 'proxy-authenticate', 'expect', 'http2-settings', 'host']
/** Where the request came from, as a trusted load balancer says: the gateway's own values unless trusted. */
export const FORWARDED = ['forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip']
/**
 * Removed from every request, whatever `trust_forwarded_headers` says: other spellings of the client's address
 * or the request's origin that frameworks read (and a client could choose), and method or URL overrides, by
 * which an upstream that honours them (Symfony, Laravel, IIS URL Rewrite, Express method-override) would serve
 * another method or path than the one the route's policy was checked for.
 */
export const STRIPPED_HEADERS = [
  'x-forwarded-prefix', 'x-forwarded-server', 'x-forwarded-scheme', 'x-forwarded-ssl', 'x-forwarded-by', 'x-forwarded',
  'forwarded-for', 'x-original-forwarded-for', 'x-client-ip', 'true-client-ip', 'x-cluster-client-ip', 'cf-connecting-ip',
  'fastly-client-ip', 'x-original-host', 'x-host', 'x-original-url', 'x-rewrite-url', 'x-original-uri',
  'x-http-method-override', 'x-http-method', 'x-method-override', 'x-original-method',
] as const

export const DEFAULT_IDENTITY_HEADERS = {
  subject: 'X-Auth-Subject',
  client_id: 'X-Auth-Client-Id',
  scopes: 'X-Auth-Scopes',
  issuer: 'X-Auth-Issuer',
} as const

export function identityNames(forward: ForwardConfig | undefined): string[] {
  const names = { ...DEFAULT_IDENTITY_HEADERS, ...forward?.identity_headers }
  return [names.subject, names.client_id, names.scopes, names.issuer].map((name) => name.toLowerCase())
}

/**
 * Names a claim header may not take (`claim_headers`): what frames the request or carries credentials, the
 * hop-by-hop, forwarding and override headers, and the identity headers.
 */
export function reservedHeaderNames(forward: ForwardConfig | undefined): ReadonlySet<string> {
  return new Set([...HOP_BY_HOP, ...FORWARDED, ...STRIPPED_HEADERS, ...identityNames(forward),
    'authorization', 'cookie', 'content-length', 'content-type', 'content-encoding', 'dpop',
    // A decision's answer carries the claim headers too (`decision:`): nothing a proxy reads from it as an instruction.
    'cache-control', 'expires', 'set-cookie', 'www-authenticate', 'location', 'retry-after', 'allow', 'ratelimit', 'ratelimit-policy',
    'x-accel-redirect', 'x-accel-expires', 'x-accel-buffering', 'x-accel-limit-rate', 'x-accel-charset'])
}

/** RFC 9110 §7.6.1: the header fields a Connection header names are hop-by-hop too. */
export function connectionListed(connection: string | string[] | undefined): Set<string> | undefined {
  if (connection === undefined || connection === 'keep-alive' || connection === 'close') return undefined
  const names = (Array.isArray(connection) ? connection.join(',') : connection).toLowerCase().split(',')
  return new Set(names.map((name) => name.trim()))
}

/**
 * `text` safe in a header value: printable ASCII as it is, `%` and every other byte (of its UTF-8) as `%XX` — gRPC's
 * Percent-Encoding of `grpc-message`, and how a certificate subject is forwarded.
 */
export function percentEncoded(text: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(text)) return text
  let out = ''
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
  }
  return out
}
