/**
 * The request body on the proxy path: whether there is one, and how the upstream gets it. Bodies up to
 * `server.body_buffer_size` are read whole before an upstream connection is taken, so a client that sends
 * slowly holds none (nginx's request buffering); larger ones stream, counted and watched. Every body is
 * watched for pauses and a minimum rate (body-watch.ts); a form that may carry a token is read whole.
 */
import type { IncomingMessage } from 'node:http'
import type { Readable } from 'node:stream'
import { namesAccessToken } from '../authn/bearer.js'
import { InvalidRequest, MalformedRequest, RateLimited, RequestTooLarge } from '../errors/oauth-errors.js'
import { clientAddress } from '../ratelimit/limiter.js'
import { InFlightByKey } from '../common/in-flight.js'
import { isHttp2Request } from '../common/http2.js'
import { isGrpcRequest } from '../errors/grpc.js'
import { BodyMeter } from './proxy.js'
import { watchBody, type BodyPolicy } from './body-watch.js'
import type { BodyHold } from './body-memory.js'

// Anywhere in the header: `application/x-www-form-urlencoded , text/plain` is a form to lenient parsers.
const FORM_CONTENT_TYPE = /x-www-form-urlencoded/i

export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length']
  if (req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')) return true
  // RFC 9113 §8.1: over HTTP/2 a body is the DATA frames after the HEADERS, which end the stream when there is none.
  return length === undefined && isHttp2Request(req) && !(req as IncomingMessage & { stream: { endAfterHeaders: boolean } }).stream.endAfterHeaders
}

/**
 * Before a refusal: whether the request has a body not read yet, which must not be read now (it may be 50 MB): the
 * answer then ends an HTTP/1.1 connection. An HTTP/2 stream's DATA is discarded meanwhile (a paused stream would stop
 * node reading the whole connection), and the stream is reset once answered.
 */
export function leavesBodyUnread(req: IncomingMessage): boolean {
  const unread = hasBody(req) && !req.readableEnded
  if (unread && isHttp2Request(req)) req.resume()
  return unread
}

/** The first bytes of a body: all of it (`ended`), or the chunks read until more than the bound arrived. */
interface Prefix {
  chunks: Buffer[]
  ended: boolean
}

// Past a limit we stop reading but never destroy the client's request: that would reset the connection
// before the 413 (or 408) goes out. The server closes the connection once the response is written.

/**
 * Reads until the body ends or more than `bound` bytes have arrived (then the request is paused with the
 * rest unread); more than `limit` in all is RequestTooLarge.
 */
function readPrefix(req: IncomingMessage, bound: number, limit: number, policy: BodyPolicy, hold: BodyHold): Promise<Prefix> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const settle = (error?: Error, ended = false) => {
      watch.stop()
      req.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose)
      req.pause()
      if (error) reject(error)
      else resolve({ chunks, ended })
    }
    const watch = watchBody(policy, req, settle)
    const onData = (chunk: Buffer) => {
      size += chunk.length
      watch.seen(chunk.length)
      // `server.body_memory`: held until the exchange ends, whatever becomes of the body.
      try {
        policy.memory.take(hold, chunk.length)
      } catch (error) {
        settle(error as Error)
        return
      }
      chunks.push(chunk)
      if (size > limit) settle(new RequestTooLarge(limit))
      else if (size > bound) settle()
    }
    const onEnd = () => settle(undefined, true)
    const onClose = () => settle(new MalformedRequest('the request body ended early'))
    req.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose)
  })
}

/**
 * The rest of a body as it streams to the upstream, after the chunks already read: counted (past `limit` it
 * fails with RequestTooLarge; a declared length is enforced by Node's parser) and watched.
 */
function streamRest(req: IncomingMessage, prefix: readonly Buffer[], limit: number, policy: BodyPolicy): BodyMeter {
  const done = admitStream(req, policy)
  const meter = new BodyMeter(limit)
  // Whichever comes first: the body handed on and ended (or failed), or the request over (answered, refused, gone).
  meter.once('close', done)
  req.once('close', done)
  const watch = watchBody(policy, req, (error) => meter.destroy(error))
  meter.onChunk = (bytes) => watch.seen(bytes)
  const release = () => { watch.stop(); req.unpipe(meter); req.pause() }
  meter.on('error', release)
  // All received: what is left is the upstream's reading, no business of the client's.
  req.on('end', () => watch.stop())
  // A client gone mid-body must abort the upstream request, which would otherwise wait for the rest.
  req.on('close', () => { if (!req.complete) meter.destroy(new MalformedRequest('the request body ended early')) })
  for (const chunk of prefix) meter.write(chunk)
  return req.pipe(meter)
}

/** A gRPC call's messages as they come, counted against `limit`: see requestBody. */
function streamCall(req: IncomingMessage, limit: number): BodyMeter {
  const meter = new BodyMeter(limit)
  req.on('close', () => { if (!req.complete) meter.destroy(new MalformedRequest('the request body ended early')) })
  meter.on('error', () => { req.unpipe(meter); req.pause() })
  return req.pipe(meter)
}

/** Bodies streaming to an upstream now, by client address (clientAddress: an IPv6 /64 is one). */
const streamingFrom = new InFlightByKey()

/**
 * One more body streamed from this request's client address, or RateLimited (429) past
 * `server.body_streams_per_address`: one address's slow uploads cannot take the upstreams' share of streamed
 * bodies (half of each pool) from everyone else. Returns the release, safe to call more than once.
 */
function admitStream(req: IncomingMessage, policy: BodyPolicy): () => void {
  const address = clientAddress(req, policy.trustForwarded)
  const release = streamingFrom.take(address, policy.streamsPerAddress)
  if (release === undefined) {
    throw new RateLimited('body_streams_per_address', 1, null, `${streamingFrom.count(address)} request bodies already streaming from this address`)
  }
  return release
}

/**
 * A body read whole, at most `limit` bytes (RequestTooLarge past it; before any is read when the declared
 * length says so): the messages of MCP routes, which the gateway reads before they are forwarded.
 */
export async function readWholeBody(req: IncomingMessage, limit: number, policy: BodyPolicy, hold: BodyHold): Promise<Buffer> {
  const length = req.headers['content-length']
  if (length !== undefined && !(Number(length) <= limit)) throw new RequestTooLarge(limit)
  return Buffer.concat((await readPrefix(req, limit, limit, policy, hold)).chunks)
}

/** The request body as the upstream gets it: buffered (small bodies, forms that may carry a token) or streamed. */
/** What reading a body needs of its route: `max_body_size`, and whether a form may carry a token (`auth`). */
export interface BodyLimits {
  readonly maxBodySize: number
  readonly auth: 'required' | 'optional' | 'none'
}

/**
 * @param hold what the exchange holds of `server.body_memory` (given back when it ends)
 * @param multiplexed the upstream speaks HTTP/2 (`upstreams.<name>.http2`): a slow body holds one of its streams,
 *   not a connection. A gRPC call's body then streams at once, unwatched and uncounted per address (a streaming
 *   call's client may wait for answers between its messages, for as long as the call lasts), within the route's
 *   max_body_size and `server.http2.idle_timeout`.
 */
export async function requestBody(req: IncomingMessage, rule: BodyLimits, policy: BodyPolicy, hold: BodyHold, multiplexed = false): Promise<Readable | Buffer | null> {
  if (!hasBody(req)) return null
  // A gRPC call is an HTTP/2 request: `application/grpc` over HTTP/1.1 is watched like any other body.
  if (multiplexed && isHttp2Request(req) && isGrpcRequest(req)) return streamCall(req, rule.maxBodySize)
  const length = req.headers['content-length']
  const declared = length === undefined ? undefined : Number(length)
  if (declared !== undefined && !(declared <= rule.maxBodySize)) throw new RequestTooLarge(rule.maxBodySize)
  // RFC 6750 §2.2 and §3.1: a form body may carry access_token too; on a route that looks at tokens, read the
  // form (bounded) to refuse it: a second token beside the header's, or on an `auth: optional` route the only
  // one, which the upstream would honour for a request forwarded as anonymous.
  if (rule.auth !== 'none' && FORM_CONTENT_TYPE.test(req.headers['content-type'] ?? '')) {
    const body = Buffer.concat((await readPrefix(req, rule.maxBodySize, rule.maxBodySize, policy, hold)).chunks)
    if (namesAccessToken(body.toString('latin1'))) {
      throw new InvalidRequest('access tokens in the request body are not accepted; use the Authorization header')
    }
    return body
  }
  // A declared length over the buffer streams at once; a chunked body is read up to the buffer to find out.
  if (policy.bufferSize === 0 || (declared !== undefined && declared > policy.bufferSize)) return streamRest(req, [], rule.maxBodySize, policy)
  const prefix = await readPrefix(req, policy.bufferSize, rule.maxBodySize, policy, hold)
  if (prefix.ended) return Buffer.concat(prefix.chunks)
  return streamRest(req, prefix.chunks, rule.maxBodySize, policy)
}
