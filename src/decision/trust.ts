/**
 * Who may ask for a decision (`decision.trust`). The headers that describe the request are exactly what the proxy
 * mode strips from clients: a caller who can send them picks the URL being authorized. Every configured
 * check must pass: the caller's address, the shared secret (compared in constant time), the client
 * certificate's name.
 */
import type { IncomingMessage } from 'node:http'
import { isIPv4 } from 'node:net'
import type { TLSSocket } from 'node:tls'
import { timingSafeEqual } from 'node:crypto'
import { GatewayError } from '../errors/oauth-errors.js'
import { sha256, type DecisionTrust } from './settings.js'

/** 403 for a caller that is not the trusted proxy: no challenge, nothing about what would have been decided. */
export class UntrustedCaller extends GatewayError {
  readonly code = 'untrusted_caller'
  readonly status = 403
  constructor(reason: string) {
    super('this endpoint answers the configured proxy only', { detail: reason })
  }
}

function headerCount(req: IncomingMessage, lower: string): number {
  let n = 0
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === lower.length && raw[i]!.toLowerCase() === lower) n++
  return n
}

/** The DNS subjectAltNames of a verified peer certificate; its subject CN only when it has none (RFC 6125 §6.4.4). */
function certificateNames(socket: TLSSocket): string[] {
  const cert = socket.getPeerCertificate()
  const names = (cert.subjectaltname ?? '').split(', ').filter((entry) => entry.startsWith('DNS:')).map((entry) => entry.slice(4))
  if (names.length > 0) return names
  const cn = cert.subject?.CN
  return typeof cn === 'string' ? [cn] : []
}

/** Throws UntrustedCaller unless `req` passes every check `trust` configures. */
export function requireTrusted(trust: DecisionTrust, req: IncomingMessage): void {
  if (trust.addresses !== null) {
    const raw = req.socket.remoteAddress ?? ''
    const address = raw.startsWith('::ffff:') && isIPv4(raw.slice(7)) ? raw.slice(7) : raw
    const admitted = isIPv4(address) ? trust.addresses.ipv4.check(address, 'ipv4') : trust.addresses.ipv6.check(address, 'ipv6')
    if (!admitted) throw new UntrustedCaller('caller_address')
  }
  if (trust.secret !== null) {
    const value = req.headers[trust.secret.header]
    // One value exactly: a second copy could be the client's, passed on by the proxy beside its own.
    if (typeof value !== 'string' || headerCount(req, trust.secret.header) !== 1) throw new UntrustedCaller('caller_secret')
    if (!timingSafeEqual(sha256(value), trust.secret.digest)) throw new UntrustedCaller('caller_secret')
  }
  if (trust.certificates) {
    const socket = req.socket as TLSSocket
    // The listener refuses unverified certificates in the handshake; checked again here, not assumed.
    if (!socket.encrypted || !socket.authorized) throw new UntrustedCaller('caller_certificate')
    if (trust.certificateNames !== null && !certificateNames(socket).some((name) => trust.certificateNames!.has(name))) {
      throw new UntrustedCaller('caller_certificate_name')
    }
  }
}
