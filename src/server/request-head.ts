/**
 * What the HTTP parser lets through but a gateway must not (RFC 9112): checked on every request, proxied or
 * served by the authorization server, before anything else looks at it.
 */
import type { IncomingMessage } from 'node:http'
import { HttpVersionNotSupported, MalformedRequest, type GatewayError } from '../errors/oauth-errors.js'
import { isHttp2Request } from '../common/http2.js'

/** Why this request head is refused, or undefined. */
export function requestHeadProblem(req: IncomingMessage): GatewayError | undefined {
  if (req.httpVersionMajor !== 1) {
    // Node's HTTP/1.1 parser accepts any `HTTP/d.d` and would have us answer `HTTP/2.0` as HTTP/1.1; a request of
    // the HTTP/2 server (server.http2) has its stream.
    if (!isHttp2Request(req)) return new HttpVersionNotSupported()
    // RFC 9113 §8.3.1: a Host that names another authority than `:authority` makes the request malformed.
    const host = req.headers.host
    const authority = req.headers[':authority']
    if (host !== undefined && typeof authority === 'string' && host.toLowerCase() !== authority.toLowerCase()) {
      return new MalformedRequest('Host and :authority differ')
    }
    return undefined
  }
  // RFC 9112 §3.2: more than one Host is 400. Node keeps the first; an upstream or a cache may take the last.
  const raw = req.rawHeaders
  let hosts = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    if (name.length === 4 && name.toLowerCase() === 'host' && ++hosts > 1) return new MalformedRequest('more than one Host header')
  }
  return undefined
}
