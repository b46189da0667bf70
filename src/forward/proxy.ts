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
import { BadGateway, GatewayError, GatewayTimeout, RequestTooLarge } from '../errors/oauth-errors.js'
import { filterResponseHeaders, type OutgoingHeaders } from './upstream-headers.js'

export interface Upstream {
  readonly name: string
  /** `builtin:echo` answers in-process; otherwise `pool` forwards. */
  readonly echo: boolean
  readonly pool: Pool | undefined
  readonly timeoutMs: number
}

export function createUpstream(name: string, config: UpstreamConfig): Upstream {
  const timeoutMs = parseDuration(config.timeout ?? '30s')
  if (config.url === 'builtin:echo') return { name, echo: true, pool: undefined, timeoutMs }
  const origin = new URL(config.url).origin
  const tls = origin.startsWith('https:')
  const pool = new Pool(origin, {
    connections: config.connections ?? 128,
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
  return { name, echo: false, pool, timeoutMs }
}

function writeResponseHead({ statusCode, headers, opaque: res }: Dispatcher.StreamFactoryData<ServerResponse>): ServerResponse {
  res.writeHead(statusCode, filterResponseHeaders(headers))
  return res
}

export function forwardRequest(upstream: Upstream, req: IncomingMessage, res: ServerResponse,
  headers: OutgoingHeaders, body: Readable | Buffer | null): Promise<Dispatcher.StreamData<ServerResponse>> {
  return upstream.pool!.stream<ServerResponse>({
    path: req.url!,
    method: req.method as Dispatcher.HttpMethod,
    headers,
    body,
    opaque: res,
  }, writeResponseHead)
}

/** What went wrong talking to the upstream, as the error the client gets. */
export function upstreamFailure(error: unknown, upstream: string): GatewayError {
  if (error instanceof GatewayError) return error
  const code = (error as { code?: string }).code ?? ''
  const detail = `upstream ${upstream}: ${code || (error as Error).message}`
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new GatewayTimeout(detail, error)
  }
  const cause = (error as { cause?: unknown }).cause
  if (cause instanceof RequestTooLarge) return cause
  return new BadGateway(detail, error)
}

/** Counts a chunked body as it streams and fails it past the limit (a Content-Length is checked up front). */
export class BodyLimit extends Transform {
  private seen = 0
  constructor(private readonly limit: number) { super() }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.seen += chunk.length
    if (this.seen > this.limit) callback(new RequestTooLarge(this.limit))
    else callback(null, chunk)
  }
}
