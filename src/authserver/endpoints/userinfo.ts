/**
 * OIDC Core §5.3 /userinfo: a Bearer-protected resource of the embedded server, not an RFC 6749
 * endpoint, so its errors carry the RFC 6750 §3 challenge with the issuer as realm (OIDC Core §5.3.3).
 * The token comes from the Authorization header (GET or POST) or a form `access_token` (POST, RFC 6750
 * §2.2); a query `access_token` is ignored (OAuth 2.1 §5.1), never a third method. Only the
 * claims of the granted scopes are returned (OIDC Core §5.4).
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { extractBearerToken } from '../../authn/bearer.js'
import {
  GatewayError, InsufficientScope, InvalidRequest, InvalidToken, MethodNotAllowed, MissingToken, ServerError,
} from '../../errors/oauth-errors.js'
import { challengeFor } from '../../errors/render.js'
import type { AuthServerContext } from '../context.js'
import { noStore, parseForm, sendCorsPreflight } from '../http.js'
import { SCOPE_CLAIMS } from '../claims.js'
import { findAccessToken } from '../token-lookup.js'

/** Our tokens are far smaller; anything larger is not one of them. */
const MAX_TOKEN_SIZE = 16 * 1024

const ALLOWED = ['GET', 'HEAD', 'POST'] as const

/** `{error, error_description}` with the Bearer challenge (RFC 6750 §3) for the token errors. */
function sendUserinfoError(reply: FastifyReply, error: unknown, issuer: string): FastifyReply {
  const failure = error instanceof GatewayError ? error : new ServerError(error)
  if (failure.status >= 500) reply.log.error({ err: failure.internal.cause, detail: failure.internal.detail }, 'userinfo error')
  else reply.log.info({ error: failure.code, reason: failure.internal.detail ?? failure.description }, 'userinfo request refused')
  noStore(reply).code(failure.status).header('content-type', 'application/json; charset=utf-8')
  const challenge = challengeFor(failure, issuer)
  if (challenge !== undefined) reply.header('www-authenticate', challenge)
  if (failure instanceof MethodNotAllowed) reply.header('allow', failure.allow.join(', '))
  return reply.send(JSON.stringify({ error: failure.code, error_description: failure.description }))
}

/** RFC 6750 §2: exactly one of the header and (POST only) the form parameter; the query is never read. */
function tokenOf(request: FastifyRequest): string {
  const fromHeader = extractBearerToken(request.raw, MAX_TOKEN_SIZE)
  const fromForm = request.method === 'POST' ? parseForm(request.body).get('access_token') : undefined
  if (fromHeader !== undefined && fromForm !== undefined) throw new InvalidRequest('the access token was sent by more than one method')
  const token = fromHeader ?? fromForm
  if (token === undefined) throw new MissingToken()
  return token
}

export function registerUserinfo(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/userinfo`
  const issuer = ctx.settings.issuer
  app.route({
    method: ['GET', 'POST'],
    url: path,
    // A body fastify cannot read (not a form, too large) is a bad request to a protected resource: challenge too.
    errorHandler: (error: FastifyError, _request, reply) => sendUserinfoError(reply,
      error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500
        ? new InvalidRequest('the body must be application/x-www-form-urlencoded')
        : new ServerError(error), issuer),
    handler: async (request, reply) => {
      try {
        const found = await findAccessToken(ctx, tokenOf(request))
        if (!found || found.type !== 'access_token') throw new InvalidToken('unknown, expired or revoked access token')
        const record = found.record
        // findAccessToken verifies a JWT's exp and the deny-list; an opaque record is checked here.
        if (record.exp * 1000 <= ctx.now()) throw new InvalidToken('expired access token')
        if (ctx.revocations.isRevoked(record.jti)) throw new InvalidToken('revoked access token')
        // A client_credentials token (sub = client_id) or a user no longer configured has no claims to give.
        const user = await ctx.accounts.find(record.sub)
        if (!user) throw new InvalidToken(`no user has the token's subject (client ${record.clientId})`)
        const scopes = new Set(record.scope.split(' ').filter((scope) => scope !== ''))
        if (!scopes.has('openid')) throw new InsufficientScope(['openid'], 'the access token was not granted openid')
        const body: Record<string, unknown> = { sub: record.sub }
        for (const scope of scopes) {
          for (const claim of SCOPE_CLAIMS[scope] ?? []) {
            if (Object.hasOwn(user.claims, claim) && user.claims[claim] !== undefined) body[claim] = user.claims[claim]
          }
        }
        return noStore(reply).code(200).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
      } catch (error) {
        return sendUserinfoError(reply, error, issuer)
      }
    },
  })
  // A single-page app reads userinfo cross-origin with its Bearer token: no cookies, so `*` is safe.
  app.options(path, (_request, reply) => sendCorsPreflight(reply, ALLOWED))
  app.route({
    method: ['PUT', 'PATCH', 'DELETE'],
    url: path,
    handler: (_request, reply) => sendUserinfoError(reply, new MethodNotAllowed(ALLOWED), issuer),
  })
  return [path]
}
