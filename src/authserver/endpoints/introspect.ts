/**
 * RFC 7662 introspection: confidential callers only (§2.1); every inactive case is exactly
 * `{"active":false}` (§2.2); an active token is shown only to its own client or to a client in its
 * audience (§4), with the token's own claims (§2.2).
 */
import type { FastifyInstance } from 'fastify'
import { InvalidClient, InvalidRequest } from '../../errors/oauth-errors.js'
import { authenticateClient } from '../client-auth.js'
import type { AuthServerContext } from '../context.js'
import { tokenTypeOf } from '../tokens.js'
import { noStore, parseForm, refuseOtherMethods, rejectCredentialsInQuery, sendOAuthError } from '../http.js'
import { findToken } from '../token-lookup.js'

const INACTIVE = JSON.stringify({ active: false })

export function registerIntrospection(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/introspect`
  app.post(path, async (request, reply) => {
    try {
      rejectCredentialsInQuery(request)
      const form = parseForm(request.body)
      const client = await authenticateClient(request, form, ctx)
      if (!client.confidential) throw new InvalidClient(false, 'public clients may not introspect')
      const token = form.get('token')
      if (token === undefined) throw new InvalidRequest('token is required')
      const found = await findToken(ctx, token, form.get('token_type_hint'))
      noStore(reply).header('content-type', 'application/json; charset=utf-8')
      if (!found) return reply.send(INACTIVE)
      if (found.type === 'refresh_token') {
        const record = found.record
        // A refresh token is visible to its own client only, and has no token_type.
        if (record.clientId !== client.clientId) return reply.send(INACTIVE)
        return reply.send(JSON.stringify({
          active: true, scope: record.scope.join(' '), client_id: record.clientId, sub: record.sub,
          exp: found.exp, iss: ctx.settings.issuer,
        }))
      }
      const accessRecord = found.record
      if (accessRecord.clientId !== client.clientId && !accessRecord.aud.includes(client.clientId)) return reply.send(INACTIVE)
      return reply.send(JSON.stringify({
        // `access_token.claims` first (RFC 7662 §2.2 allows more members): none stands in for one below.
        ...(typeof accessRecord.claims === 'object' && accessRecord.claims),
        active: true,
        scope: accessRecord.scope,
        client_id: accessRecord.clientId,
        // RFC 9449 §6.2: a bound token says so, and names its key.
        token_type: tokenTypeOf(accessRecord.jkt),
        exp: accessRecord.exp,
        iat: accessRecord.iat,
        sub: accessRecord.sub,
        aud: accessRecord.aud.length === 1 ? accessRecord.aud[0] : accessRecord.aud,
        iss: ctx.settings.issuer,
        jti: accessRecord.jti,
        ...((accessRecord.jkt !== undefined || accessRecord.x5t !== undefined) && {
          cnf: { ...(accessRecord.jkt !== undefined && { jkt: accessRecord.jkt }), ...(accessRecord.x5t !== undefined && { 'x5t#S256': accessRecord.x5t }) },
        }),
      }))
    } catch (error) {
      return sendOAuthError(reply, error, ctx.settings.issuer)
    }
  })
  refuseOtherMethods(app, path, ['POST'], ctx.settings.issuer)
  return [path]
}
