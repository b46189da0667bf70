/**
 * The token endpoint (RFC 6749 §3.2): POST only, form body, no credentials in the query, then grant_type
 * → client authentication → the client's registration → its DPoP proof, if any (RFC 9449 §5, dpop.ts) →
 * the grant module. Every answer, success or error, is no-store (RFC 6749 §5.1, §5.2); errors are 400 except
 * invalid_client (401), throttling (429) and a store that cannot answer (503). With `dpop.nonce` on, every
 * answer carries a `DPoP-Nonce` (§8), so a client always holds a fresh one.
 */
import type { FastifyInstance, FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import { endHttpSpan, tracing } from '../../tracing/tracing.js'
import { decodeJwt } from 'jose'
import { tokenHash } from '../../authn/token-cache.js'
import { GatewayError, InvalidRequest, UnauthorizedClient, UnsupportedGrantType } from '../../errors/oauth-errors.js'
import { authenticateClient } from '../client-auth.js'
import type { AuthServerContext } from '../context.js'
import { checkTokenRequestProof } from '../dpop.js'
import type { GrantHandler } from '../grants/grant.js'
import type { StoredAccessToken, TokenResponseBody } from '../tokens.js'
import { requestedResources, resourceParameters } from '../resource.js'
import { formPostGuard, noStore, parseForm, refuseOtherMethods, sendOAuthError } from '../http.js'

/** The `client_id` label of every dynamically registered client in portcullis_tokens_issued_total (docs/metrics.md). */
const DYNAMIC_CLIENT_LABEL = '(dynamic)'

/** RFC 8707 allows several `resource` parameters; every other repeated parameter is invalid_request (RFC 6749 §3.2). */
const REPEATABLE = new Set(['resource'])

/**
 * The audit line of a success: the access token's record (as just issued, or from the store by jti or hash) names its
 * subject and grant, so the line says who got what without the token itself.
 */
async function auditIssued(ctx: AuthServerContext, request: FastifyRequest, grantType: string, clientId: string,
  body: TokenResponseBody): Promise<void> {
  let record = ctx.tokens.takeIssued(body.access_token)
  try {
    // Not just issued (a rotation's response given again within the reuse grace): its record in the store.
    const id = record !== undefined ? undefined : ctx.settings.accessTokenFormat === 'jwt' ? decodeJwt(body.access_token).jti : tokenHash(body.access_token)
    if (id !== undefined) record = await ctx.store.find('access_token', id) as StoredAccessToken | undefined
  } catch (error) {
    // The tokens are issued: a lookup that fails now costs the line its details, never the client its response.
    request.log.warn({ err: error }, 'audit: the issued access token\'s record could not be read')
  }
  ctx.audit.emit(grantType === 'refresh_token' ? 'token.refreshed' : 'token.issued', {
    grant_type: grantType, client_id: clientId, sub: record?.sub, jti: record?.jti, grant_id: record?.grantId, scope: body.scope,
    refresh_token_issued: body.refresh_token !== undefined, id_token_issued: body.id_token !== undefined,
    ip: request.ip, req_id: request.id,
  })
}

export function registerTokenEndpoint(app: FastifyInstance, ctx: AuthServerContext, grants: ReadonlyMap<string, GrantHandler>): string[] {
  const path = `${ctx.settings.prefix}/token`
  const { issuer } = ctx.settings
  // RFC 9449 §4.3: a proof's htu is the endpoint as the metadata names it, under the issuer, whatever Host says.
  const tokenEndpoint = new URL(issuer).origin + path
  const nonces = ctx.settings.dpop.nonces
  // First of the hooks, so that the answers refused before the body is read carry it too.
  const sendNonce: onRequestAsyncHookHandler | undefined = nonces
    ? async (_request, reply) => { reply.header('dpop-nonce', nonces.current()) }
    : undefined

  /** Implemented, and some client is registered for it: otherwise unsupported_grant_type (RFC 6749 §5.2). */
  function grantFor(grantType: string): GrantHandler {
    const handler = grants.get(grantType)
    // RFC 9700 §2.1.2: implicit is never a token-endpoint grant, whatever is registered.
    if (grantType === 'implicit' || !handler || !ctx.settings.grantTypes.has(handler.grantType)) {
      throw new UnsupportedGrantType(`grant_type ${JSON.stringify(grantType.slice(0, 100))} is not supported`)
    }
    return handler
  }

  // Credentials in the URI or a body that is not a form are refused before the body is read.
  app.post(path, { onRequest: sendNonce ? [sendNonce, formPostGuard(issuer)] : formPostGuard(issuer) }, async (request, reply) => {
    // OpenTelemetry: the grant in a SERVER span (the grant type, never the client's credentials or the tokens).
    const span = tracing()?.startRequest(request.raw).span
    if (span !== undefined) reply.raw.once('close', () => endHttpSpan(span, reply.raw.statusCode))
    try {
      const form = parseForm(request.body, REPEATABLE)
      const grantType = form.get('grant_type')
      if (grantType === undefined) throw new InvalidRequest('grant_type is required')
      const handler = grantFor(grantType)
      if (span !== undefined) {
        span.updateName(`POST ${path} ${handler.grantType}`)
        span.setAttributes({ 'http.route': path, 'portcullis.grant_type': handler.grantType })
      }
      const client = await authenticateClient(request, form, ctx)
      if (!client.grantTypes.has(handler.grantType)) {
        throw new UnauthorizedClient(`client ${client.clientId} is not registered for ${handler.grantType}`)
      }
      // RFC 8707: every resource named must be one clients may ask for, whatever the grant then allows.
      const audience = requestedResources(resourceParameters(request.body), ctx.settings.resourceIndicators)
      // Checked and spent before the grant runs: a refused proof leaves every code and refresh token as it was.
      const dpop = await checkTokenRequestProof(ctx, request, client, tokenEndpoint)
      const body = await handler.handle({ form, client, ip: request.ip, audience, dpop, ctx })
      // client_id is a label only once authenticated: it is then one from the config, never made up. Registered
      // clients (RFC 7591) share one value: their ids are random and unbounded in number.
      ctx.metrics.tokensIssued.inc({ grant_type: handler.grantType, client_id: client.dynamic ? DYNAMIC_CLIENT_LABEL : client.clientId })
      await auditIssued(ctx, request, handler.grantType, client.clientId, body)
      return noStore(reply).code(200).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
    } catch (error) {
      ctx.metrics.tokenErrors.inc({ error: error instanceof GatewayError ? error.code : 'server_error' })
      span?.setAttribute('error.type', error instanceof GatewayError ? error.code : 'server_error')
      return sendOAuthError(reply, error, issuer)
    }
  })
  // RFC 9449 §8: DPoP-Nonce on every answer of the endpoint, its CORS preflight and its 405 included.
  refuseOtherMethods(app, path, ['POST'], issuer, { cors: true, onRequest: sendNonce })
  return [path]
}
