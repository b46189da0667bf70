/** An HTTP/1.1 listener, or HTTPS (TLS 1.2+, ALPN http/1.1) when `tls` is set: the public and the decision listeners. */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'

export interface ListenerTls {
  readonly cert_file: string
  readonly key_file: string
  /** Require a client certificate signed by this CA (the TLS handshake refuses a client without one). */
  readonly client_ca_file?: string | undefined
}

export function createListener(tls: ListenerTls | undefined, maxHeaderSize: number, handler: http.RequestListener): http.Server {
  if (!tls) return http.createServer({ maxHeaderSize }, handler)
  return https.createServer({
    cert: readFileSync(tls.cert_file),
    key: readFileSync(tls.key_file),
    minVersion: 'TLSv1.2',
    ALPNProtocols: ['http/1.1'],
    maxHeaderSize,
    ...(tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file), requestCert: true, rejectUnauthorized: true }),
  }, handler)
}
