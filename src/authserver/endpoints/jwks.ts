/**
 * GET {issuer}/jwks: the published signing keys, public members only (RFC 7517 §4). The JWKS may be
 * cached by clients, but for much less than `signing.rotation_publish_delay` (OIDC Core §10.1.1): a new key must be in
 * every cached copy before the first token signed with it goes out.
 */
import type { FastifyInstance } from 'fastify'
import type { AuthServerContext } from '../context.js'
import { servePublicDocument } from './public-document.js'

/** A fifth of the publish delay, at most 60 s: with the default 5 min delay, caches have 4 min to spare. */
export function jwksMaxAgeSeconds(publishDelayMs: number): number {
  return Math.max(0, Math.min(60, Math.floor(publishDelayMs / 5000)))
}

export function registerJwks(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/jwks`
  servePublicDocument(app, path, {
    // RFC 7517 §8.5; oauth4webapi accepts it as well as application/json.
    contentType: 'application/jwk-set+json',
    maxAgeSeconds: jwksMaxAgeSeconds(ctx.settings.publishDelayMs),
    body: () => JSON.stringify(ctx.keys.jwks()),
    issuer: ctx.settings.issuer,
  })
  return [path]
}
