/** What a request or response of node's HTTP/2 compatibility API has that an HTTP/1.1 one has not. */
import type { IncomingMessage, ServerResponse } from 'node:http'

/** A request of the HTTP/2 server (server.http2): it carries its stream; an HTTP/1.1 request has none. */
export function isHttp2Request(req: IncomingMessage): boolean {
  return (req as IncomingMessage & { stream?: unknown }).stream !== undefined
}

/** A response on an HTTP/2 stream: connection-specific fields (`Connection`, RFC 9113 §8.2.2) must not be set on it. */
export function isHttp2Response(res: ServerResponse): boolean {
  return (res as ServerResponse & { stream?: unknown }).stream !== undefined
}

/**
 * The client can no longer be answered: the response (HTTP/1.1) or its stream (HTTP/2, reset by the client or
 * closed with its connection) is destroyed. node's HTTP/2 response has no `destroyed` of its own.
 */
export function responseGone(res: ServerResponse): boolean {
  if (res.destroyed) return true
  const stream = (res as ServerResponse & { stream?: { destroyed: boolean } }).stream
  return stream !== undefined && stream.destroyed
}

/**
 * Once the response is sent, the stream is reset with NO_ERROR (RFC 9113 §8.1: the client stops sending the body):
 * a body left unread would otherwise sit in a paused stream, and node stops reading the whole connection for it.
 */
/** RFC 9113 §7: NO_ERROR (node:http2's `constants.NGHTTP2_NO_ERROR`; this module loads nothing of node:http2). */
const NO_ERROR = 0

export function resetWhenAnswered(res: ServerResponse): void {
  const stream = (res as ServerResponse & { stream: { close(code: number): void; destroyed: boolean } }).stream
  res.once('finish', () => { if (!stream.destroyed) stream.close(NO_ERROR) })
}
