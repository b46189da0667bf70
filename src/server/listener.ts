/**
 * The public and the decision listeners: HTTP/1.1, or HTTPS (TLS 1.2+) when `tls` is set. The public listener
 * also speaks HTTP/2 (RFC 9113, `server.http2`): offered by ALPN before HTTP/1.1 with TLS, and in cleartext
 * (h2c) with prior knowledge beside HTTP/1.1 where `server.http2.cleartext` asks for it (src/server/http2.ts).
 */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { giveBearerSlot } from '../authn/bearer.js'
import { createCleartextH2, createSecureH2, type Http2Limits } from './http2.js'

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

export interface ListenerOptions {
  readonly tls: ListenerTls | undefined
  readonly maxHeaderSize: number
  /** HTTP/2 beside HTTP/1.1 (`server.http2`); undefined: HTTP/1.1 only (the decision listener). */
  readonly http2?: Http2Limits | undefined
}

/**
 * An HTTP or HTTPS server for the gateway's or the decision endpoint's requests. Each connection gets its
 * kept-Bearer slot (bearer.ts) as it is accepted, before node's own listener sees it: for HTTPS the TLS socket,
 * which is the requests' `socket`.
 *
 * With HTTP/2 the server is node's HTTP/2 server with HTTP/1.1 allowed (TLS), or an HTTP/1.1 server that hands
 * connections opening with the HTTP/2 preface to an HTTP/2 one (cleartext): either way HTTP/1.1 requests are
 * what they were, with the same events ('request', 'checkContinue', 'upgrade') on the returned server.
 */
export function createListener(options: ListenerOptions, handler: http.RequestListener): http.Server {
  const { tls, maxHeaderSize, http2 } = options
  if (tls && http2?.enabled) {
    const server = createSecureH2(secureOptions(tls, ['h2', 'http/1.1']), maxHeaderSize, http2, handler)
    server.prependListener('secureConnection', giveBearerSlot)
    return server
  }
  const server = tls
    ? https.createServer({ ...secureOptions(tls, ['http/1.1']), maxHeaderSize }, handler)
    : http.createServer({ maxHeaderSize }, handler)
  server.prependListener(tls ? 'secureConnection' : 'connection', giveBearerSlot)
  if (!tls && http2?.enabled && http2.cleartext) createCleartextH2(server, maxHeaderSize, http2, handler)
  return server
}

function secureOptions(tls: ListenerTls, ALPNProtocols: string[]): https.ServerOptions {
  return {
    cert: readFileSync(tls.cert_file),
    key: readFileSync(tls.key_file),
    minVersion: 'TLSv1.2',
    ALPNProtocols,
    ...(tls.client_certificates === 'request'
      // Asked for, not required, and not refused unverified: a self-signed certificate binds a token as well as
      // any (RFC 8705 §2.2, §3); whether it chains to client_ca_file is socket.authorized.
      ? { requestCert: true, rejectUnauthorized: false, ...(tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file) }) }
      : tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file), requestCert: true, rejectUnauthorized: true }),
  }
}

