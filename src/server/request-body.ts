/**
 * The request body on the proxy path: whether there is one, and how the upstream gets it (streamed with its
 * declared length, counted as it streams when chunked, or buffered when it is a form that may carry a token).
 */
import type { IncomingMessage } from 'node:http'
import type { Readable } from 'node:stream'
import { namesAccessToken } from '../authn/bearer.js'
import { InvalidRequest, MalformedRequest, RequestTooLarge } from '../errors/oauth-errors.js'
import { BodyLimit } from '../forward/proxy.js'
import type { CompiledRule } from '../rules/compile.js'

// Anywhere in the header: `application/x-www-form-urlencoded , text/plain` is a form to lenient parsers.
const FORM_CONTENT_TYPE = /x-www-form-urlencoded/i

export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length']
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')
}

// Past a limit we stop reading but never destroy the client's request: that would reset the connection
// before the 413 goes out. The server closes the connection once the response is written.

/** A form body, buffered up to `limit` bytes (it is small, and must be searched for a second token). */
function readLimited(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const settle = (error?: Error) => {
      req.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose)
      if (!error) return resolve(Buffer.concat(chunks))
      req.pause()
      reject(error)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) settle(new RequestTooLarge(limit))
      else chunks.push(chunk)
    }
    const onEnd = () => settle()
    const onClose = () => settle(new MalformedRequest('the request body ended early'))
    req.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose)
  })
}

/** A chunked body, counted as it streams to the upstream; past the limit it fails with RequestTooLarge. */
function limitedStream(req: IncomingMessage, limit: number): BodyLimit {
  const limiter = new BodyLimit(limit)
  limiter.on('error', () => { req.unpipe(limiter); req.pause() })
  // A client gone mid-body must abort the upstream request, which would otherwise wait for the rest.
  req.on('close', () => { if (!req.complete) limiter.destroy(new MalformedRequest('the request body ended early')) })
  return req.pipe(limiter)
}

/** The request body as the upstream gets it: streamed, size-checked, or buffered for form bodies. */
export async function requestBody(req: IncomingMessage, rule: CompiledRule): Promise<Readable | Buffer | null> {
  if (!hasBody(req)) return null
  const length = req.headers['content-length']
  if (length !== undefined && !(Number(length) <= rule.maxBodySize)) throw new RequestTooLarge(rule.maxBodySize)
  // RFC 6750 §2.2 and §3.1: a form body may carry access_token too; on a route that looks at tokens, read the
  // form (bounded) to refuse it: a second token beside the header's, or on an `auth: optional` route the only
  // one, which the upstream would honour for a request forwarded as anonymous.
  if (rule.auth !== 'none' && FORM_CONTENT_TYPE.test(req.headers['content-type'] ?? '')) {
    const body = await readLimited(req, rule.maxBodySize)
    if (namesAccessToken(body.toString('latin1'))) {
      throw new InvalidRequest('access tokens in the request body are not accepted; use the Authorization header')
    }
    return body
  }
  if (length !== undefined) return req  // Node's parser enforces the declared length
  return limitedStream(req, rule.maxBodySize)
}
