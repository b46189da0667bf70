/**
 * The token endpoint (checklist §3): POST only, form body, no credentials in the query, then grant_type
 * → client authentication → the client's registration → the grant module. Every answer, success or
 * error, is no-store (G-04); errors are 400 except invalid_client (401) and throttling (429).
 */
import type { FastifyInstance } from 'fastify'
import { GatewayError, InvalidRequest, UnauthorizedClient, UnsupportedGrantType } from '../../errors/oauth-errors.js'
import { authenticateClient } from '../client-auth.js'
import type { AuthServerContext } from '../context.js'
import type { GrantHandler } from '../grants/grant.js'
import { requestedAudience } from '../scope.js'
import { formPostGuard, noStore, parseForm, refuseOtherMethods, sendOAuthError } from '../http.js'

/** RFC 8707 allows several `resource` parameters; every other repeated parameter is invalid_request (G-06). */
const REPEATABLE = new Set(['resource'])

export function registerTokenEndpoint(app: FastifyInstance, ctx: AuthServerContext, grants: ReadonlyMap<string, GrantHandler>): string[] {
  const path = `${ctx.settings.prefix}/token`
  const { issuer } = ctx.settings

  /** Implemented, and some client is registered for it: otherwise unsupported (T-02, PW-01). */
  function grantFor(grantType: string): GrantHandler {
    const handler = grants.get(grantType)
    // RFC 9700 §2.1.2: implicit is never a token-endpoint grant, whatever is registered.
    if (grantType === 'implicit' || !handler || !ctx.settings.grantTypes.has(handler.grantType)) {
      throw new UnsupportedGrantType(`grant_type ${JSON.stringify(grantType.slice(0, 100))} is not supported`)
    }
    return handler
  }

  // Credentials in the URI or a body that is not a form are refused before the body is read.
  app.post(path, { onRequest: formPostGuard(issuer) }, async (request, reply) => {
    try {
      const form = parseForm(request.body, REPEATABLE)
      const grantType = form.get('grant_type')
      if (grantType === undefined) throw new InvalidRequest('grant_type is required')
      const handler = grantFor(grantType)
      const client = await authenticateClient(request, form, ctx)
      if (!client.grantTypes.has(handler.grantType)) {
        throw new UnauthorizedClient(`client ${client.clientId} is not registered for ${handler.grantType}`)
      }
      const audience = requestedAudience(request.body, ctx.settings.audience)
      const body = await handler.handle({ form, client, ip: request.ip, audience, ctx })
      // client_id is a label only once authenticated: it is then one from the config, never made up.
      ctx.metrics.tokensIssued.inc({ grant_type: handler.grantType, client_id: client.clientId })
      return noStore(reply).code(200).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
    } catch (error) {
      ctx.metrics.tokenErrors.inc({ error: error instanceof GatewayError ? error.code : 'server_error' })
      return sendOAuthError(reply, error, issuer)
    }
  })
  refuseOtherMethods(app, path, ['POST'], issuer, { cors: true })
  return [path]
}
