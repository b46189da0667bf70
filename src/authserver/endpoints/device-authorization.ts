/**
 * The device authorization endpoint (RFC 8628 §3.1, §3.2): POST only, form body,
 * no credentials in the query, then client authentication (or a public client's client_id) → the
 * client's registration → the scope → the RFC 8707 resources → a new device_code and user code. Errors as
 * at the token endpoint; every answer is no-store, as there (RFC 6749 §5.1).
 */
import type { FastifyInstance } from 'fastify'
import { UnauthorizedClient } from '../../errors/oauth-errors.js'
import { authenticateClient } from '../client-auth.js'
import type { AuthServerContext } from '../context.js'
import { createDeviceCode } from '../device.js'
import { DEVICE_CODE_GRANT_TYPE } from '../grant-types.js'
import { formPostGuard, noStore, parseForm, refuseOtherMethods, sendOAuthError } from '../http.js'
import { requestedResources, resourceParameters } from '../resource.js'
import { grantScope } from '../scope.js'

/** RFC 8707 allows several `resource` parameters: the grant's; the poll may narrow them. */
const REPEATABLE = new Set(['resource'])

/** Mounts POST `${prefix}/device_authorization` (405 for other methods); returns its path. */
export function registerDeviceAuthorization(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const { issuer, prefix } = ctx.settings
  const path = `${prefix}/device_authorization`
  // RFC 8628 §3.2 verification_uri: the page the user visits on another device, under the issuer like every endpoint.
  const verificationUri = `${new URL(issuer).origin}${prefix}/device`

  // Credentials in the URI or a body that is not a form are refused before the body is read.
  app.post(path, { onRequest: formPostGuard(issuer) }, async (request, reply) => {
    try {
      const form = parseForm(request.body, REPEATABLE)
      // RFC 8628 §3.1: client authentication as at /token; a public client names itself with client_id.
      const client = await authenticateClient(request, form, ctx)
      if (!client.grantTypes.has(DEVICE_CODE_GRANT_TYPE)) {
        throw new UnauthorizedClient(`client ${client.clientId} is not registered for the device_code grant`)
      }
      // The user approves on the /device page, which lists the scopes: what a user may grant it (consentScopes).
      const scope = grantScope(form.get('scope'), client.consentScopes ?? client.scopes, client.scopes)
      const resource = requestedResources(resourceParameters(request.body), ctx.settings.resourceIndicators)
      const issued = await createDeviceCode(ctx, client.clientId, scope, resource)
      const body = {
        device_code: issued.deviceCode,
        user_code: issued.userCode,
        verification_uri: verificationUri,
        // RFC 8628 §3.3.1: pre-fills the page, which still asks the user to confirm.
        verification_uri_complete: `${verificationUri}?user_code=${encodeURIComponent(issued.userCode)}`,
        expires_in: issued.expiresIn,
        interval: issued.interval,
      }
      return noStore(reply).code(200).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
    } catch (error) {
      return sendOAuthError(reply, error, issuer)
    }
  })
  refuseOtherMethods(app, path, ['POST'], issuer)
  return [path]
}
