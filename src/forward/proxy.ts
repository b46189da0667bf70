/**
 * Forwarding on one undici Pool per upstream, streaming both ways (ARCHITECTURE "Forward"): the request
 * body is piped, never buffered, and the response is written straight into the client's response.
 */
import { readFileSync } from 'node:fs'
import { Transform, type Readable, type TransformCallback } from 'node:stream'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { buildConnector, Pool, type Dispatcher } from 'undici'
import type { UpstreamConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { BadGateway, GatewayError, GatewayTimeout, RequestTooLarge, TemporarilyUnavailable } from '../errors/oauth-errors.js'
import { isHttp2Response, responseGone } from '../common/http2.js'
import { leaveWaiting, type HoldsPlace } from '../common/waiting.js'
import { relayTrailers, setHeaders, withHeaders } from './relay-fields.js'
import { responseHeaderList } from './response-headers.js'
import { poolSize, STREAMS_PER_CONNECTION } from './pool-size.js'
import type { HeaderList } from './upstream-headers.js'
import type { CorsAnswer } from '../cors/policy.js'
import { withCorsHeaders } from '../cors/response.js'

export interface Upstream {
  readonly name: string
  /** `builtin:echo` answers in-process; otherwise `pool` forwards. */
  readonly echo: boolean
  readonly pool: Pool | undefined
  /** `upstreams.<name>.http2`: HTTP/2 to the upstream (ALPN h2 over TLS, prior knowledge in cleartext). */
  readonly http2: boolean
  readonly timeoutMs: number
  /**
   * The pool's size: with this many requests in flight, the next one waits for a connection. With HTTP/2, each
   * connection carries up to STREAMS_PER_CONNECTION requests at once.
   */
  readonly connections: number
  /** How long a request may wait for a free connection before it is answered 503 (`queue_timeout`). */
  readonly queueTimeoutMs: number
  /** Requests dispatched on the pool and not yet ended (waiting for a connection included). */
  busy: number
  /** Of those, the ones whose body streams from the client (larger than `server.body_buffer_size`). */
  streaming: number
  /** At most this many streamed bodies at once: slow uploads can never hold every connection. */
  readonly maxStreaming: number
}

export function createUpstream(name: string, config: UpstreamConfig): Upstream {
  const timeoutMs = parseDuration(config.timeout ?? '30s')
  const { connections, maxStreaming } = poolSize(config)
  const queueTimeoutMs = parseDuration(config.queue_timeout ?? '5s')
  const counters = { busy: 0, streaming: 0, maxStreaming }
  if (config.url === 'builtin:echo') return { name, echo: true, pool: undefined, http2: false, timeoutMs, connections, queueTimeoutMs, ...counters }
  const origin = new URL(config.url).origin
  const tls = origin.startsWith('https:')
  const http2 = config.http2 === true
  const connectTimeout = Math.min(timeoutMs, 10_000)
  const pool = new Pool(origin, {
    connections: config.connections ?? 128,
    pipelining: http2 ? STREAMS_PER_CONNECTION : 1,
    ...(http2 && { allowH2: true }),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connectTimeout,
    // Cleartext HTTP/2 with prior knowledge (h2c): the Pool does not pass `useH2c` on to its connector.
    ...(http2 && !tls && { connect: buildConnector({ useH2c: true, timeout: connectTimeout } as buildConnector.BuildOptions) }),
    // Certificate verification is always on; ca_file replaces the system CAs for a private CA.
    ...(tls && {
      connect: {
        rejectUnauthorized: true,
        ALPNProtocols: http2 ? ['h2'] : ['http/1.1'],
        ...(config.ca_file !== undefined && { ca: readFileSync(config.ca_file) }),
      },
    }),
  })
  return { name, echo: false, pool, http2, timeoutMs, connections, queueTimeoutMs, ...counters }
}

/** Why an upstream request was aborted: the client's response closed before it was complete. */
export class ClientGone extends Error {
  override readonly name = 'ClientGone'
  constructor() { super('the client closed the connection before the response was complete') }
}

/**
 * undici's handler for one forwarded request: writes the upstream's status, headers and body straight into
 * the client's response, with backpressure both ways, and aborts the upstream request when the client goes
 * away. (undici's `stream()` does the same through an AsyncResource, `stream.finished` and a header object:
 * about 5 µs more per request.) `done` is called once: with nothing when the response has been relayed,
 * with the error otherwise; the caller listens for the response's 'close' and calls `clientClosed`.
 */
export class ForwardHandler implements Dispatcher.DispatchHandler {
  private abort: ((error: Error) => void) | undefined
  private resume: (() => void) | undefined
  /** onComplete or onError has come, or the wait for a connection ran out: `done` is called (or queued). */
  private settled = false
  /** Set while the request waits for a free pool connection, when it may have to. */
  private queued: NodeJS.Timeout | undefined
  /** Counted in `upstream.busy` (and `streaming`) until undici is done with the request. */
  private counted: Upstream | undefined
  private streamed = false
  /** The upstream's `grpc-status` (in its trailers, or its headers for a trailers-only answer), for the log and metrics. */
  grpcStatus: number | undefined

  /** `relay`: its CORS headers and RateLimit fields go into the response head, and its place among the waiting is left then. */
  constructor(private readonly res: ServerResponse, private readonly done: (error?: Error) => void, private readonly relay: Relay) {}

  /** Counts the request as in flight on `upstream` until undici is done with it. */
  countOn(upstream: Upstream, streamed: boolean): void {
    upstream.busy++
    if (streamed) upstream.streaming++
    this.counted = upstream
    this.streamed = streamed
  }

  /** The client's response closed: the upstream request is aborted unless it has already ended. */
  clientClosed(): void {
    if (!this.settled) this.abort?.(new ClientGone())
  }

  /** Answers 503 if no pool connection has taken the request within `ms`; the request is then never sent. */
  waitAtMost(ms: number, upstream: string): void {
    this.queued = setTimeout(() => {
      this.queued = undefined
      if (this.settled) return
      this.settled = true
      this.done(new TemporarilyUnavailable(`upstream ${upstream}: no free connection within ${ms} ms`, 1))
    }, ms)
  }

  onConnect(abort: (error?: Error) => void): void {
    clearTimeout(this.queued)
    // The client may have left while the request waited (its token validated, its body read, a connection
    // free): 'close' came before there was anything to abort, and nothing must be written to it now. Or it
    // waited too long and has been answered 503.
    if (this.settled || responseGone(this.res)) abort(new ClientGone())
    else this.abort = abort
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true  // an interim response (103 Early Hints) is not relayed; the final one follows
    this.resume = resume
    let headers = responseHeaderList(rawHeaders)
    const relay = this.relay
    if (relay.cors) headers = withCorsHeaders(headers, relay.cors)
    if (relay.rateLimitFields) headers = withHeaders(headers, relay.rateLimitFields)
    // gRPC's trailers-only answer (its status among the headers, the stream ended with them) stays one: set now,
    // sent by `end()` in the one HEADERS frame that ends the stream (node sends writeHead's at once, without it).
    if (isHttp2Response(this.res) && headers.includes('grpc-status')) {
      this.grpcStatus = Number(headers[headers.indexOf('grpc-status') + 1])
      setHeaders(this.res, statusCode, headers)
    } else {
      this.res.writeHead(statusCode, headers)
    }
    // Answered: from here on the response streams, and no longer waits (`server.admission`).
    leaveWaiting(relay)
    return true
  }

  onData(chunk: Buffer): boolean {
    if (this.res.write(chunk)) return true
    // A destroyed response never drains: abort instead of waiting for it.
    if (responseGone(this.res)) {
      this.abort?.(new ClientGone())
      return false
    }
    this.res.once('drain', this.resume!)
    return false
  }

  private release(): void {
    if (!this.counted) return
    this.counted.busy--
    if (this.streamed) this.counted.streaming--
    this.counted = undefined
  }

  onComplete(trailers?: Record<string, string | string[]> | string[] | Buffer[] | null): void {
    this.release()
    this.settled = true
    // Trailers (gRPC's status lives in them): relayed as they came, where the client's protocol can carry them.
    if (trailers && (!Array.isArray(trailers) || trailers.length > 0)) {
      const fields = relayTrailers(this.res, trailers)
      if (fields['grpc-status'] !== undefined) this.grpcStatus = Number(fields['grpc-status'])
    }
    this.res.end()
    this.done()
  }

  onError(error: Error): void {
    this.release()
    // Settled already: `done` threw inside onComplete, and undici reports that as this request's error too;
    // or the request was answered 503 while it waited for a connection.
    if (this.settled) return
    this.settled = true
    // Out of undici's call stack: the caller answers the client, which must not run inside the pool's loop.
    queueMicrotask(() => this.done(error))
  }
}

/** What forwarding reads of a request on its way (the gateway's per-request exchange has it all). */
export interface Relay extends HoldsPlace {
  readonly req: IncomingMessage
  /** The request headers for the upstream. */
  readonly headers: HeaderList
  readonly body: Readable | Buffer | null
  /** The CORS headers of the request's origin, when the gateway answers CORS on the route (`cors`). */
  readonly cors?: CorsAnswer | null | undefined
  /** `[name, value, …]` added to the response (the RateLimit fields): they replace any the upstream sent. */
  readonly rateLimitFields?: readonly string[] | null | undefined
}

/**
 * Forwards the request on the upstream's pool; `done` is called when the upstream's response has been
 * relayed, or with the error that ended it. The returned handler is told when the client goes away.
 */
export function forwardRequest(upstream: Upstream, res: ServerResponse, relay: Relay, done: (error?: Error) => void): ForwardHandler {
  const { req, headers, body } = relay
  const streamed = body !== null && !Buffer.isBuffer(body)
  // Half the pool at most for bodies that arrive as slowly as the client likes (within body_min_rate).
  if (streamed && upstream.streaming >= upstream.maxStreaming) {
    throw new TemporarilyUnavailable(`upstream ${upstream.name}: ${upstream.maxStreaming} streamed request bodies in flight`, 1)
  }
  const handler = new ForwardHandler(res, done, relay)
  // Every connection busy: this one queues, for a bounded time (a timer only then, not on the hot path).
  if (upstream.busy >= upstream.connections) handler.waitAtMost(upstream.queueTimeoutMs, upstream.name)
  handler.countOn(upstream, streamed)
  upstream.pool!.dispatch({ path: req.url!, method: req.method as Dispatcher.HttpMethod, headers, body }, handler)
  return handler
}

/** What went wrong talking to the upstream, as the error the client gets. */
export function upstreamFailure(error: unknown, upstream: string): GatewayError {
  if (error instanceof GatewayError) return error
  const code = (error as { code?: string }).code ?? ''
  const detail = `upstream ${upstream}: ${code || (error as Error).message}`
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new GatewayTimeout(detail, error)
  }
  // The body stream failed with our own error (too large, too slow): that is the answer.
  const cause = (error as { cause?: unknown }).cause
  if (cause instanceof GatewayError) return cause
  return new BadGateway(detail, error)
}

/** Counts a body as it streams and fails it past the limit (a Content-Length is also checked up front). */
export class BodyMeter extends Transform {
  private seen = 0
  /** Told of every chunk (the body watch). */
  onChunk: ((bytes: number) => void) | undefined
  constructor(private readonly limit: number) { super() }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.seen += chunk.length
    this.onChunk?.(chunk.length)
    if (this.seen > this.limit) callback(new RequestTooLarge(this.limit))
    else callback(null, chunk)
  }
}
