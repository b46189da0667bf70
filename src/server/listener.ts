/** An HTTP/1.1 listener, or HTTPS (TLS 1.2+, ALPN http/1.1) when `tls` is set: the public and the decision listeners. */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { giveBearerSlot } from '../authn/bearer.js'

export interface ListenerTls {
  readonly cert_file: string
  readonly key_file: string
  /**
   * The decision listener: require a client certificate signed by this CA (the handshake refuses a client
   * without one). The public listener with `client_certificates: request`: the CAs a certificate is checked
   * against (socket.authorized, for `tls_client_auth`), none required.
   */
  readonly client_ca_file?: string | undefined
  /** `server.tls.client_certificates`: `request` asks for a certificate and accepts any, or none (RFC 8705). */
  readonly client_certificates?: 'off' | 'request' | undefined
}

/**
 * An HTTP or HTTPS server for the gateway's or the decision endpoint's requests. Each connection gets its
 * kept-Bearer slot (bearer.ts) as it is accepted, before node's own listener sees it: for HTTPS the TLS socket,
 * which is the requests' `socket`.
 */
export function createListener(tls: ListenerTls | undefined, maxHeaderSize: number, handler: http.RequestListener): http.Server {
  const server = tls ? createTlsListener(tls, maxHeaderSize, handler) : http.createServer({ maxHeaderSize }, handler)
  server.prependListener(tls ? 'secureConnection' : 'connection', giveBearerSlot)
  return server
}

function createTlsListener(tls: ListenerTls, maxHeaderSize: number, handler: http.RequestListener): https.Server {
  return https.createServer({
    cert: readFileSync(tls.cert_file),
    key: readFileSync(tls.key_file),
    minVersion: 'TLSv1.2',
    ALPNProtocols: ['http/1.1'],
    maxHeaderSize,
    ...(tls.client_certificates === 'request'
      // Asked for, not required, and not refused unverified: a self-signed certificate binds a token as well as
      // any (RFC 8705 §2.2, §3); whether it chains to client_ca_file is socket.authorized.
      ? { requestCert: true, rejectUnauthorized: false, ...(tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file) }) }
      : tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file), requestCert: true, rejectUnauthorized: true }),
  }, handler)
}
