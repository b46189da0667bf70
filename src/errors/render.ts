/** The only writer of error responses: JSON body `{error, error_description}` plus the RFC 6750 challenge. */
import type { ServerResponse } from 'node:http'
import { isHttp2Response, resetWhenAnswered } from '../common/http2.js'
import { renderGrpcError } from './grpc.js'
import { DpopRefused, GatewayError, HeadersTooLarge, InsufficientScope, MalformedRequest, MethodNotAllowed, MissingToken, RateLimited, TemporarilyUnavailable } from './oauth-errors.js'

/** quoted-string safe: descriptions and scopes are ours, but never let one break the header. */
function quote(value: string): string {
  return '"' + value.replace(/["\\\r\n]/g, '') + '"'
}

/** What a protected resource's routes add to their challenges (RFC 9728 §5.1; MCP 2026-07-28, Scope Selection Strategy). */
export interface ResourceChallenge {
  /** `resource_metadata`: the resource's metadata URL. */
  readonly metadataUrl: string
  /** `scope` on a 401: what the route asks for, so a client requests that at once; undefined when it asks for none. */
  readonly scope: string | undefined
}

/**
 * The RFC 6750 challenge; on a protected resource's routes (RFC 9728 §5.1), every 401 and the 403
 * `insufficient_scope` also name its metadata: `resource_metadata="https://…/.well-known/oauth-protected-resource"`,
 * and a 401 the scopes the route asks for (RFC 6750 §3 allows `scope` on any challenge).
 */
export function challengeFor(error: GatewayError, realm: string, resource?: ResourceChallenge): string | undefined {
  if (!error.challenge) return undefined
  // RFC 9449 §7.1: DPoP's own scheme, with the algorithms a proof may use.
  const dpopAlgs = error instanceof DpopRefused ? error.algs : error instanceof MissingToken ? error.dpopAlgs : undefined
  let header = `${dpopAlgs === undefined ? 'Bearer' : 'DPoP'} realm=${quote(realm)}`
  let extra = ''
  if (resource !== undefined && (error.status === 401 || error instanceof InsufficientScope)) {
    if (error.status === 401 && resource.scope !== undefined) extra += `, scope=${quote(resource.scope)}`
    extra += `, resource_metadata=${quote(resource.metadataUrl)}`
  }
  if (dpopAlgs !== undefined) extra += `, algs=${quote(dpopAlgs)}`
  if (error instanceof MissingToken) return header + extra  // RFC 6750 §3.1: no error code when no token was sent
  header += `, error=${quote(error.code)}, error_description=${quote(error.description)}`
  if (error instanceof InsufficientScope) header += `, scope=${quote(error.required.join(' '))}`
  return header + extra
}

export function errorHeaders(error: GatewayError, realm: string, resource?: ResourceChallenge): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
  }
  const challenge = challengeFor(error, realm, resource)
  if (challenge) headers['www-authenticate'] = challenge
  if (error instanceof MethodNotAllowed) headers.allow = error.allow.join(', ')
  if (error instanceof TemporarilyUnavailable) headers['retry-after'] = String(error.retryAfterSeconds)
  if (error instanceof DpopRefused && error.nonce !== undefined) headers['dpop-nonce'] = error.nonce
  if (error instanceof RateLimited) {
    headers['retry-after'] = String(error.retryAfterSeconds)
    for (let i = 0; i < (error.fields?.length ?? 0); i += 2) headers[error.fields![i]!] = error.fields![i + 1]!
  }
  return headers
}

export function errorBody(error: GatewayError): string {
  return JSON.stringify({ error: error.code, error_description: error.description })
}

/** How a refusal is answered, besides its error. */
export interface Refusal {
  /** `server.realm`, for the challenge. */
  readonly realm: string
  /** End the connection with the answer (a body left unread, another HTTP version). */
  readonly close?: boolean
  /** The RFC 9728 metadata of the route's resource, for the challenge. */
  readonly resource?: ResourceChallenge | undefined
  /**
   * The CORS headers of the request's origin on its route (`cors:`), when the gateway answers CORS there: a SPA
   * reads its refusals (and their challenge) too.
   */
  readonly cors?: Readonly<Record<string, string>> | undefined
  /** A gRPC call (`content-type: application/grpc…`): answered with a gRPC status (grpc.ts). */
  readonly grpc?: boolean
}

export function renderError(res: ServerResponse, error: GatewayError, refusal: Refusal): void {
  const { realm, resource, cors } = refusal
  if (res.headersSent) {
    res.destroy()
    return
  }
  const headers = errorHeaders(error, realm, resource)
  if (cors !== undefined) Object.assign(headers, cors)
  if (refusal.grpc) return renderGrpcError(res, error, headers)
  const body = errorBody(error)
  headers['content-length'] = String(Buffer.byteLength(body))
  if (refusal.close) {
    // RFC 9113 §8.2.2: HTTP/2 has no Connection field; the stream alone ends, reset once answered.
    if (isHttp2Response(res)) resetWhenAnswered(res)
    else headers.connection = 'close'
  }
  res.writeHead(error.status, headers)
  res.end(body)
}

/** For upgrade requests: the socket has no ServerResponse, so write the HTTP/1.1 response by hand. */
export function renderErrorOnSocket(socket: NodeJS.WritableStream & { destroy(): void }, error: GatewayError, realm: string,
  resource?: ResourceChallenge): void {
  const body = errorBody(error)
  const headers = { ...errorHeaders(error, realm, resource), 'content-length': String(Buffer.byteLength(body)), connection: 'close' }
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join('\r\n')
  socket.end(`HTTP/1.1 ${error.status} ${STATUS_TEXT[error.status] ?? 'Error'}\r\n${head}\r\n\r\n${body}`)
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed',
  408: 'Request Timeout', 413: 'Payload Too Large', 431: 'Request Header Fields Too Large', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout', 505: 'HTTP Version Not Supported',
}

/** The raw answer to a request node's parser refused (`clientError`): 431 for an oversized head, else 400; closes. */
export function clientErrorResponse(error: NodeJS.ErrnoException, realm: string): string {
  const failure = error.code === 'HPE_HEADER_OVERFLOW' ? new HeadersTooLarge() : new MalformedRequest('malformed HTTP request')
  const body = errorBody(failure)
  const headers = { ...errorHeaders(failure, realm), 'content-length': String(Buffer.byteLength(body)), connection: 'close' }
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join('\r\n')
  return `HTTP/1.1 ${failure.status} ${STATUS_TEXT[failure.status] ?? 'Error'}\r\n${head}\r\n\r\n${body}`
}
