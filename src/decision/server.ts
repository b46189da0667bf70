/**
 * The decision endpoint's own listener (`decision.listen`, issue 23): apart from the public one, so that a
 * firewall, a NetworkPolicy or a loopback address keeps it out of clients' reach. HTTPS when `decision.tls`
 * is set; with `tls.client_ca_file`, the handshake itself refuses callers without a certificate from that CA.
 */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import type { Socket } from 'node:net'
import type { DecisionConfig } from '../config/schema.js'
import { MalformedRequest } from '../errors/oauth-errors.js'
import { errorBody, errorHeaders } from '../errors/render.js'
import type { DecisionEndpoint } from './endpoint.js'

export function createDecisionServer(config: DecisionConfig, endpoint: DecisionEndpoint, maxHeaderSize: number, realm: string): http.Server {
  const tls = config.tls
  const server = tls
    ? https.createServer({
      cert: readFileSync(tls.cert_file),
      key: readFileSync(tls.key_file),
      minVersion: 'TLSv1.2',
      ALPNProtocols: ['http/1.1'],
      maxHeaderSize,
      ...(tls.client_ca_file !== undefined && { ca: readFileSync(tls.client_ca_file), requestCert: true, rejectUnauthorized: true }),
    }, endpoint.handleRequest)
    : http.createServer({ maxHeaderSize }, endpoint.handleRequest)
  // Proxies keep pools of connections to their auth service (nginx `keepalive`: 60 s idle by default): outlast
  // them, so that a proxy does not reuse a connection this side is closing.
  server.keepAliveTimeout = 75_000
  // A proxy sends a decision request at once: a caller slow to send its head gets nothing but a closed socket.
  server.headersTimeout = 10_000
  server.requestTimeout = 10_000
  // No 'upgrade' listener: node then serves a request with `Upgrade` (Caddy passes the client's on) as any other.
  server.on('checkContinue', endpoint.handleRequest)
  server.on('connect', (_req, socket: Socket) => socket.destroy())
  server.on('clientError', (_error, socket: Socket) => {
    if (!socket.writable) return socket.destroy()
    const failure = new MalformedRequest('malformed HTTP request')
    const body = errorBody(failure)
    const headers = { ...errorHeaders(failure, realm), 'content-length': String(Buffer.byteLength(body)), connection: 'close' }
    socket.end(`HTTP/1.1 400 Bad Request\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join('\r\n')}\r\n\r\n${body}`)
  })
  return server
}
