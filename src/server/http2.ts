/**
 * HTTP/2 on the public listener (RFC 9113, `server.http2`). Requests reach the same handler as HTTP/1.1 ones,
 * through node's compatibility API, and every event is emitted on the one server the rest of the gateway knows.
 *
 * The limits HTTP/1.1 has hold here too: `server.max_header_size` is the header list a peer may send
 * (SETTINGS_MAX_HEADER_LIST_SIZE; past it the stream is refused), `max_concurrent_streams` the streams at once on
 * a connection, and a stream or a connection without progress for `idle_timeout` is closed (a zero window held
 * by the client ends so, and frees what it held). Against the known attacks on HTTP/2 servers, node's nghttp2
 * (1.61 in Node 20.20) counts what a peer makes the server do and ends the connection past its bounds: rapid
 * reset (CVE-2023-44487: streams opened and reset, `maxSessionRejectedStreams` and nghttp2's reset rate limit),
 * CONTINUATION floods (CVE-2024-27316 class: frames past the header list size), HPACK bombs (the decoded list
 * size, not the encoded one, counts), SETTINGS and PING floods (acknowledgements queued unsent). Tests:
 * test/server/http2-abuse.test.ts.
 */
import http from 'node:http'
import http2 from 'node:http2'
import type { Socket } from 'node:net'
import type { SecureServerOptions } from 'node:http2'
import { giveBearerSlot } from '../authn/bearer.js'
import type { GatewayConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { HeadersTooLarge } from '../errors/oauth-errors.js'
import { isGrpcRequest } from '../errors/grpc.js'
import { renderError } from '../errors/render.js'

export interface Http2Limits {
  /** `server.http2.enabled`: h2 by ALPN on the TLS listener. */
  readonly enabled: boolean
  /** `server.http2.cleartext`: h2c with prior knowledge on a cleartext listener, beside HTTP/1.1. */
  readonly cleartext: boolean
  /** `server.http2.max_concurrent_streams` */
  readonly maxConcurrentStreams: number
  /** `server.http2.idle_timeout`, in ms */
  readonly idleMs: number
}

/** `server.http2` with its defaults: h2 offered with TLS, h2c only where asked, 100 streams, 60 s without progress. */
export function http2Limits(config: GatewayConfig): Http2Limits {
  const section = config.server?.http2
  return {
    enabled: section?.enabled ?? true,
    cleartext: section?.cleartext ?? false,
    maxConcurrentStreams: section?.max_concurrent_streams ?? 100,
    idleMs: parseDuration(section?.idle_timeout ?? '60s'),
  }
}

/**
 * `server.max_header_size` on an HTTP/2 request, as RFC 9113 §6.5.2 counts a header list (each field's name and
 * value and 32), pseudo-headers included. nghttp2 holds a client to SETTINGS_MAX_HEADER_LIST_SIZE only once the
 * client has acknowledged it; a request sent with the connection preface would otherwise get past it. Answered
 * 431 (a gRPC call: RESOURCE_EXHAUSTED), never forwarded.
 */
export function refusedOversized(req: http.IncomingMessage, res: http.ServerResponse, maxHeaderSize: number): boolean {
  const raw = req.rawHeaders
  let size = 0
  for (let i = 0; i < raw.length; i += 2) size += raw[i]!.length + raw[i + 1]!.length + 32
  if (size <= maxHeaderSize) return false
  renderError(res, new HeadersTooLarge(), { realm: '', grpc: isGrpcRequest(req) })
  return true
}

/** The connection preface every HTTP/2 client sends first (RFC 9113 §3.4). */
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

const H2_SOCKET = Symbol('portcullis.http2')

/** Whether `socket` carries an HTTP/2 session (its requests' `socket` is then a stand-in, not this one). */
export function isHttp2Socket(socket: Socket): boolean {
  return (socket as Socket & { [H2_SOCKET]?: true })[H2_SOCKET] === true
}

function sessionOptions(maxHeaderSize: number, limits: Http2Limits): http2.ServerOptions {
  return {
    // A peer's header list, decoded (an HPACK bomb is counted as what it expands to).
    settings: { maxConcurrentStreams: limits.maxConcurrentStreams, maxHeaderListSize: maxHeaderSize, enablePush: false },
    // Streams refused (over max_concurrent_streams, or reset at once) before the session is ended: rapid reset.
    maxSessionRejectedStreams: 100,
    maxSessionInvalidFrames: 1000,
    // Our own PINGs unanswered, and the entries of one SETTINGS frame; nghttp2 bounds the acknowledgements (of a
    // peer's PINGs and SETTINGS) it owes and ends a session that floods them (ENHANCE_YOUR_CALM).
    maxOutstandingPings: 10,
    maxSettings: 32,
    // The most a session may buffer (MB), HPACK tables and queued frames included, before new streams are refused.
    maxSessionMemory: 10,
  }
}

/** Each session and stream closed after `idleMs` without progress; each session's socket marked. */
function watchSessions(h2: http2.Http2Server | http2.Http2SecureServer, limits: Http2Limits): void {
  h2.on('session', (session: http2.ServerHttp2Session) => {
    session.setTimeout(limits.idleMs, () => session.destroy())
  })
  h2.on('stream', (stream: http2.ServerHttp2Stream) => {
    stream.setTimeout(limits.idleMs, () => stream.close(http2.constants.NGHTTP2_CANCEL))
  })
}

/**
 * With TLS: node's HTTP/2 server, HTTP/1.1 allowed for clients that do not offer h2. Node's own HTTP/1.1 limits
 * (`maxHeaderSize`, the request and header timeouts) are set on it as on an HTTPS server.
 */
export function createSecureH2(tls: SecureServerOptions, maxHeaderSize: number, limits: Http2Limits,
  handler: http.RequestListener): http.Server {
  const server = http2.createSecureServer({ ...tls, ...sessionOptions(maxHeaderSize, limits), allowHTTP1: true })
  // The HTTP/1.1 side reads its header limit from the server, as node's HTTP server does.
  ;(server as unknown as { maxHeaderSize: number }).maxHeaderSize = maxHeaderSize
  server.on('request', handler as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void)
  server.prependListener('secureConnection', (socket: Socket & { alpnProtocol?: string | false }) => {
    if (socket.alpnProtocol === 'h2') (socket as Socket & { [H2_SOCKET]?: true })[H2_SOCKET] = true
  })
  watchSessions(server, limits)
  return server as unknown as http.Server
}

/**
 * In cleartext: `server` (HTTP/1.1) looks at the first bytes of each connection; one that opens with the HTTP/2
 * preface goes to an HTTP/2 server of its own, whose requests and sessions are emitted on `server`. No byte is
 * read twice or lost: what was read is put back before either parser sees it.
 */
export function createCleartextH2(server: http.Server, maxHeaderSize: number, limits: Http2Limits, handler: http.RequestListener): void {
  const h2 = http2.createServer(sessionOptions(maxHeaderSize, limits))
  h2.on('request', (req, res) => server.emit('request', req, res))
  h2.on('checkContinue', (req, res) => {
    if (server.listenerCount('checkContinue') > 0) server.emit('checkContinue', req, res)
    else handler(req as unknown as http.IncomingMessage, res as unknown as http.ServerResponse)
  })
  h2.on('session', (session) => server.emit('session', session))
  watchSessions(h2, limits)
  // Node's HTTP/1.1 connection listener (and the kept-Bearer slot): called for a connection that is not HTTP/2.
  const http1 = server.listeners('connection') as Array<(socket: Socket) => void>
  server.removeAllListeners('connection')
  server.on('connection', (socket: Socket) => {
    sniff(socket, (isH2) => {
      if (!isH2) {
        for (const listener of http1) listener.call(server, socket)
        // Paused by the sniff, a socket stays paused when a 'data' listener is added: the bytes put back wait.
        socket.resume()
        return
      }
      (socket as Socket & { [H2_SOCKET]?: true })[H2_SOCKET] = true
      giveBearerSlot(socket)
      // Accepted by the HTTP/1.1 server, the socket allows half-open connections; an HTTP/2 session does not, and
      // ends its side when the client has ended its own (as node's HTTP/2 server's sockets do).
      socket.once('end', () => socket.end())
      h2.emit('connection', socket)
    })
  })
}

/** How long a new cleartext connection may take to send the bytes that tell its protocol, as node's headersTimeout. */
const SNIFF_TIMEOUT_MS = 10_000

/**
 * Reads until the first bytes tell HTTP/2's preface from anything else (at most its 24 bytes), puts them back,
 * and calls `then` once. A connection that sends too little for too long is closed.
 */
function sniff(socket: Socket, then: (isH2: boolean) => void): void {
  let seen: Buffer = Buffer.alloc(0)
  const timer = setTimeout(() => socket.destroy(), SNIFF_TIMEOUT_MS)
  const onError = () => socket.destroy()
  const decide = (isH2: boolean) => {
    clearTimeout(timer)
    socket.removeListener('error', onError)
    socket.removeListener('data', onData)
    socket.removeListener('end', onEnd)
    socket.pause()
    socket.unshift(seen)
    then(isH2)
  }
  const onData = (chunk: Buffer) => {
    seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk])
    const compared = Math.min(seen.length, PREFACE.length)
    if (!seen.subarray(0, compared).equals(PREFACE.subarray(0, compared))) decide(false)
    else if (seen.length >= PREFACE.length) decide(true)
  }
  const onEnd = () => decide(false)
  socket.on('data', onData)
  socket.once('end', onEnd)
  socket.on('error', onError)
}
