/**
 * The decision endpoint's own listener (`decision.listen`): apart from the public one, so that a
 * firewall, a NetworkPolicy or a loopback address keeps it out of clients' reach. HTTPS when `decision.tls`
 * is set; with `tls.client_ca_file`, the handshake itself refuses callers without a certificate from that CA.
 */
import type http from 'node:http'
import type { Socket } from 'node:net'
import type { DecisionConfig } from '../config/schema.js'
import { clientErrorResponse } from '../errors/render.js'
import { createListener } from './listener.js'
import type { DecisionEndpoint } from './decision.js'

export function createDecisionServer(config: DecisionConfig, endpoint: DecisionEndpoint, maxHeaderSize: number, realm: string): http.Server {
  const server = createListener({ tls: config.tls, maxHeaderSize }, endpoint.handleRequest)
  // Proxies keep pools of connections to their auth service (nginx `keepalive`: 60 s idle by default): outlast
  // them, so that a proxy does not reuse a connection this side is closing.
  server.keepAliveTimeout = 75_000
  // A proxy sends a decision request at once: a caller slow to send its head gets nothing but a closed socket.
  server.headersTimeout = 10_000
  server.requestTimeout = 10_000
  // No 'upgrade' listener: node then serves a request with `Upgrade` (Caddy passes the client's on) as any other.
  server.on('checkContinue', endpoint.handleRequest)
  server.on('connect', (_req, socket: Socket) => socket.destroy())
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    if (socket.writable) socket.end(clientErrorResponse(error, realm))
    else socket.destroy()
  })
  return server
}
