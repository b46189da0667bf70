/**
 * A refusal of a gRPC call as gRPC answers it (gRPC over HTTP/2, "Responses"): HTTP 200 and a trailers-only
 * response — one HEADERS frame that ends the stream — whose `grpc-status` and `grpc-message` say why. The
 * challenge (`www-authenticate`), `retry-after` and the RateLimit fields are sent as for any refusal.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { percentEncoded } from '../common/header-names.js'
import type { GatewayError } from './base.js'

/** gRPC status codes (grpc/doc/statuscodes.md) a refusal can carry. */
export const GrpcStatus = {
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const

/** `application/grpc`, `application/grpc+proto`, …; not gRPC-Web (`application/grpc-web…`), which is not supported. */
export function isGrpcRequest(req: IncomingMessage): boolean {
  const type = req.headers['content-type']
  if (type === undefined || !type.startsWith('application/grpc')) return false
  const next = type.charCodeAt(16)
  return Number.isNaN(next) || next === 43 /* + */ || next === 59 /* ; */
}

/** The gRPC status of a refusal: who may not call is 16 or 7, too much is 8, an upstream down 14. */
export function grpcStatusOf(error: GatewayError): number {
  switch (error.status) {
    case 401: return GrpcStatus.UNAUTHENTICATED
    case 403: return GrpcStatus.PERMISSION_DENIED
    case 404: case 405: return GrpcStatus.UNIMPLEMENTED
    case 408: case 504: return GrpcStatus.DEADLINE_EXCEEDED
    case 413: case 429: case 431: return GrpcStatus.RESOURCE_EXHAUSTED
    case 502: case 503: return GrpcStatus.UNAVAILABLE
    // RFC 6750 §3.1: a malformed token request (400 invalid_request with its challenge) is about the credential.
    case 400: return error.challenge ? GrpcStatus.UNAUTHENTICATED : GrpcStatus.INVALID_ARGUMENT
    default: return GrpcStatus.INTERNAL
  }
}

/**
 * Writes `headers` (the refusal's own: challenge, Retry-After, …) with the gRPC status as a trailers-only
 * response. Set, then ended with no body: node sends them in the one HEADERS frame that ends the stream.
 */
export function renderGrpcError(res: ServerResponse, error: GatewayError, headers: Record<string, string>): void {
  res.statusCode = 200
  for (const name in headers) {
    if (name === 'content-type' || name === 'content-length' || name === 'connection') continue
    res.setHeader(name, headers[name]!)
  }
  res.setHeader('content-type', 'application/grpc')
  res.setHeader('grpc-status', String(grpcStatusOf(error)))
  res.setHeader('grpc-message', percentEncoded(`${error.code}: ${error.description}`))
  res.end()
}
