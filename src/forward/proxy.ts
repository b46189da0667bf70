/**
 * Forwarding on one undici Pool per upstream, streaming both ways (ARCHITECTURE "Forward"): the request
 * body is piped, never buffered, and the response is written straight into the client's response.
 */
import { readFileSync } from 'node:fs'
import { Transform, type Readable, type TransformCallback } from 'node:stream'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { Pool, type Dispatcher } from 'undici'
import type { UpstreamConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { BadGateway, GatewayError, GatewayTimeout, RequestTooLarge, TemporarilyUnavailable } from '../errors/oauth-errors.js'
import { responseHeaderList } from './response-headers.js'
import type { HeaderList } from './upstream-headers.js'
import type { CorsAnswer } from '../cors/policy.js'
import { withCorsHeaders } from '../cors/response.js'

export interface Upstream {
  readonly name: string
  /** `builtin:echo` answers in-process; otherwise `pool` forwards. */
  readonly echo: boolean
  readonly pool: Pool | undefined
  readonly timeoutMs: number
  /** The pool's size: with this many requests in flight, the next one waits for a connection. */
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

/** `upstreams.<name>.connections`, and the half of them request bodies that stream from clients may hold at once. */
export function poolSize(config: UpstreamConfig): { connections: number; maxStreaming: number } {
  const connections = config.connections ?? 128
  return { connections, maxStreaming: Math.max(1, Math.floor(connections / 2)) }
}

export function createUpstream(name: string, config: UpstreamConfig): Upstream {
  const timeoutMs = parseDuration(config.timeout ?? '30s')
  const { connections, maxStreaming } = poolSize(config)
  const queueTimeoutMs = parseDuration(config.queue_timeout ?? '5s')
  const counters = { busy: 0, streaming: 0, maxStreaming }
  if (config.url === 'builtin:echo') return { name, echo: true, pool: undefined, timeoutMs, connections, queueTimeoutMs, ...counters }
  const origin = new URL(config.url).origin
  const tls = origin.startsWith('https:')
  const pool = new Pool(origin, {
    connections,
    pipelining: 1,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connectTimeout: Math.min(timeoutMs, 10_000),
    // Certificate verification is always on; ca_file replaces the system CAs for a private CA.
    ...(tls && {
      connect: {
        rejectUnauthorized: true,
        ALPNProtocols: ['http/1.1'],
        ...(config.ca_file !== undefined && { ca: readFileSync(config.ca_file) }),
      },
    }),
  })
  return { name, echo: false, pool, timeoutMs, connections, queueTimeoutMs, ...counters }
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

  /**
   * @param cors the CORS headers of the request's origin, when the gateway answers CORS on the route
   * @param extra `[name, value, …]` the gateway adds to the response (the RateLimit fields); they
   *   replace any the upstream sent of the same names
   */
  constructor(private readonly res: ServerResponse, private readonly done: (error?: Error) => void,
    private readonly cors: CorsAnswer | null | undefined = null, private readonly extra: readonly string[] | null = null) {}

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
    if (this.res.destroyed || this.settled) abort(new ClientGone())
    else this.abort = abort
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true  // an interim response (103 Early Hints) is not relayed; the final one follows
    this.resume = resume
    let headers = responseHeaderList(rawHeaders)
    if (this.cors) headers = withCorsHeaders(headers, this.cors)
    if (this.extra !== null) headers = withHeaders(headers, this.extra)
    this.res.writeHead(statusCode, headers)
    return true
  }

  onData(chunk: Buffer): boolean {
    if (this.res.write(chunk)) return true
    // A destroyed response never drains: abort instead of waiting for it.
    if (this.res.destroyed) {
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

  onComplete(): void {
    this.release()
    this.settled = true
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

/** `list` (lower-case names) without the names `extra` sets, then `extra`'s. */
function withHeaders(list: readonly string[], extra: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < list.length; i += 2) {
    if (extra.includes(list[i]!)) continue
    out.push(list[i]!, list[i + 1]!)
  }
  for (const value of extra) out.push(value)
  return out
}

/** What forwarding reads of a request on its way (the gateway's per-request exchange has it all). */
export interface Relay {
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
  const handler = new ForwardHandler(res, done, relay.cors, relay.rateLimitFields ?? null)
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
