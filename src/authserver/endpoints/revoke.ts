/**
 * RFC 7009 token revocation: the caller authenticates (public clients name themselves),
 * and the answer is 200 with an empty body for anything that is not an error of the request itself —
 * unknown, expired, already revoked (§2.2), or another client's token (§2.1 allows refusing; 200 is no oracle).
 */
import type { FastifyInstance } from 'fastify'
import { InvalidRequest } from '../../errors/oauth-errors.js'
import { authenticateClient } from '../client-auth.js'
import type { AuthServerContext } from '../context.js'
import { noStore, parseForm, refuseOtherMethods, rejectCredentialsInQuery, sendOAuthError } from '../http.js'
import { revokeGrant } from '../revoke-grant.js'
import { findToken } from '../token-lookup.js'

export function registerRevocation(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/revoke`
  app.post(path, async (request, reply) => {
    try {
      rejectCredentialsInQuery(request)
      const form = parseForm(request.body)
      const client = await authenticateClient(request, form, ctx)
      const token = form.get('token')
      if (token === undefined) throw new InvalidRequest('token is required')
      const found = await findToken(ctx, token, form.get('token_type_hint'))
      if (found && found.record.clientId === client.clientId) {
        if (found.type === 'refresh_token') {
          // RFC 7009 §2.1: revoking a refresh token ends its grant, access tokens included.
          await revokeGrant(ctx, found.record.grantId, 'refresh token revoked')
        } else {
          // An access token alone, at once (a JWT's jti is deny-listed); its refresh token lives on.
          await ctx.store.destroy('access_token', found.id)
          if (found.record.format === 'jwt') await ctx.revocations.revokeJti(found.record.jti, found.record.exp)
          else ctx.revocations.revokeHash(found.id)
        }
        ctx.audit.emit('token.revoked', {
          client_id: client.clientId, sub: found.record.sub, token_type: found.type, grant_id: found.record.grantId,
          ...(found.type === 'access_token' && { jti: found.record.jti }), ip: request.ip, req_id: request.id,
        })
      }
      return noStore(reply).code(200).header('content-length', '0').send()
    } catch (error) {
      return sendOAuthError(reply, error, ctx.settings.issuer)
    }
  })
  refuseOtherMethods(app, path, ['POST'], ctx.settings.issuer, { cors: true })
  return [path]
}
