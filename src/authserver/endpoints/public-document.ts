/**
 * A document anyone may fetch (the metadata and the JWKS): GET and HEAD, cacheable by shared caches,
 * CORS for every origin. Other methods get 405 with `Allow: GET, HEAD`; OPTIONS answers a CORS preflight.
 * Never a redirect (strict clients fetch with `redirect: 'manual'`): only the exact path is registered.
 */
import type { FastifyInstance } from 'fastify'
import { MethodNotAllowed } from '../../errors/oauth-errors.js'
import { sendOAuthError } from '../http.js'

export interface PublicDocument {
  readonly contentType: string
  readonly maxAgeSeconds: number
  /** The JSON text; called per request (the JWKS changes with rotations). */
  readonly body: () => string
  /** For the Basic realm of errors, as on every endpoint of the embedded server. */
  readonly issuer: string
}

const ALLOWED = ['GET', 'HEAD'] as const

export function servePublicDocument(app: FastifyInstance, path: string, document: PublicDocument): void {
  const cacheControl = `public, max-age=${document.maxAgeSeconds}`
  app.route({
    method: [...ALLOWED],
    url: path,
    handler: (_request, reply) => reply
      .header('cache-control', cacheControl)
      .header('access-control-allow-origin', '*')
      .header('content-type', document.contentType)
      // A Buffer, so fastify adds no charset parameter: JSON is UTF-8 (RFC 8259 §8.1), and
      // application/jwk-set+json defines no parameters.
      .send(Buffer.from(document.body())),
  })
  app.route({
    method: 'OPTIONS',
    url: path,
    handler: (_request, reply) => reply.code(204)
      .header('allow', [...ALLOWED, 'OPTIONS'].join(', '))
      .header('access-control-allow-origin', '*')
      .header('access-control-allow-methods', ALLOWED.join(', '))
      .header('access-control-max-age', '86400')
      .send(),
  })
  app.route({
    method: ['POST', 'PUT', 'PATCH', 'DELETE'],
    url: path,
    handler: (_request, reply) => sendOAuthError(reply, new MethodNotAllowed(ALLOWED), document.issuer),
  })
}
