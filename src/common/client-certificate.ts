/**
 * TLS client certificates (RFC 8705): the `x5t#S256` thumbprint that binds a token to a certificate (§3.1),
 * and what the gateway and the embedded server read of the certificate a connection presented. Read once per
 * connection: every request on it shares the answer.
 */
import { createHash, X509Certificate } from 'node:crypto'
import { TLSSocket } from 'node:tls'

/** RFC 8705 §3.1: the base64url SHA-256 of the DER-encoded certificate. */
export function certificateThumbprint(der: Buffer): string {
  return createHash('sha256').update(der).digest('base64url')
}

export interface PeerCertificate {
  /** `x5t#S256` of the certificate (certificateThumbprint). */
  readonly thumbprint: string
  /** The subject as an RFC 4514 string (last RDN first, `,` between RDNs), e.g. `CN=orders,O=Example`. */
  readonly subject: string
  /** The DNS names of its subjectAltName. */
  readonly dnsNames: readonly string[]
  /** Whether it chains to the listener's `client_ca_file` (node's check; false without one, or for a self-signed one). */
  readonly authorized: boolean
}

const peers = new WeakMap<TLSSocket, PeerCertificate | null>()

/** The certificate the client presented on this connection (a TLS socket), or undefined (none, or not TLS). */
export function peerCertificate(socket: unknown): PeerCertificate | undefined {
  if (!(socket instanceof TLSSocket)) return undefined
  let peer = peers.get(socket)
  if (peer === undefined) {
    peer = readPeer(socket)
    peers.set(socket, peer)
  }
  return peer ?? undefined
}

function readPeer(socket: TLSSocket): PeerCertificate | null {
  const raw = socket.getPeerX509Certificate?.()
  if (raw === undefined) return null
  const der = raw.raw
  return {
    thumbprint: certificateThumbprint(der),
    subject: rfc4514(raw),
    dnsNames: dnsNamesOf(raw),
    authorized: socket.authorized,
  }
}

/** node writes the subject one `KEY=value` per line, first RDN first; RFC 4514 writes the last first, comma-separated. */
function rfc4514(certificate: X509Certificate): string {
  return certificate.subject.split('\n').filter((line) => line !== '').reverse().join(',')
}

function dnsNamesOf(certificate: X509Certificate): string[] {
  const names = certificate.subjectAltName
  if (names === undefined) return []
  return names.split(', ').filter((entry) => entry.startsWith('DNS:')).map((entry) => entry.slice(4))
}

/** A subject DN as configured (`tls_client_auth_subject_dn`): spaces around `,` and `=` dropped, for comparison. */
export function normalizeDn(dn: string): string {
  return dn.split(',').map((rdn) => rdn.split('=').map((part) => part.trim()).join('=')).join(',')
}
