/** An HTTP/1.1 listener, or HTTPS (TLS 1.2+, ALPN http/1.1) when `tls` is set: the public and the decision listeners. */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { giveBearerSlot } from '../authn/bearer.js'

export interface ListenerTls {
  readonly cert_file: string
  readonly key_file: string
  /** Require a client certificate signed by this CA (the TLS handshake refuses a client without one). */
  readonly client_ca_file?: string | undefined
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
    ...(tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file), requestCert: true, rejectUnauthorized: true }),
  }, handler)
}
