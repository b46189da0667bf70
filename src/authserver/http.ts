/**
 * What every back-channel endpoint of the embedded server shares: form bodies only (RFC 6749 App. B),
 * repeated parameters refused and empty ones omitted (RFC 6749 §3.1, §3.2), no credentials in the query
 * (RFC 6749 §2.3.1), POST only with 405 + Allow (RFC 6749 §3.2), no-store on everything (RFC 6749 §5.1),
 * one error renderer (RFC 6749 §5.2).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import {
  GatewayError, InvalidClient, InvalidRequest, MethodNotAllowed, ServerError, TemporarilyUnavailable, TooManyAttempts,
} from '../errors/oauth-errors.js'

export type Form = ReadonlyMap<string, string>

/** RFC 6749 §3.1, §3.2: repeated parameters are invalid_request; empty values count as omitted. */
export function parseForm(body: unknown, repeatable: ReadonlySet<string> = new Set()): Form {
  const form = new Map<string, string>()
  if (body === undefined || body === null) return form
  if (typeof body !== 'object') throw new InvalidRequest('the body must be application/x-www-form-urlencoded')
  for (const [name, value] of Object.entries(body as Record<string, unknown>)) {
    if (Array.isArray(value)) {
      if (!repeatable.has(name)) throw new InvalidRequest(`the parameter ${name} is repeated`)
      const first = value.find((item) => item !== '')
      if (typeof first === 'string') form.set(name, first)
      continue
    }
    if (typeof value === 'string' && value !== '') form.set(name, value)
  }
  return form
}

const CREDENTIAL_PARAMETERS = ['client_secret', 'code', 'refresh_token', 'device_code', 'token', 'password', 'code_verifier']

/** RFC 6749 §2.3.1: credentials in the request URI are refused, not ignored. */
export function rejectCredentialsInQuery(request: FastifyRequest): void {
  const url = request.raw.url ?? ''
  const q = url.indexOf('?')
  if (q === -1) return
  const query = new URLSearchParams(url.slice(q + 1))
  for (const name of CREDENTIAL_PARAMETERS) {
    if (query.has(name)) throw new InvalidRequest(`${name} must not be sent in the query string`)
  }
}

/** Responses that carry or concern credentials are never cached (RFC 6749 §5.1, OAuth 2.1 §3.2.3). */
export function noStore(reply: FastifyReply): FastifyReply {
  return reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
}

/** The one error writer of the embedded server: `{error, error_description}` and the right headers. */
export function sendOAuthError(reply: FastifyReply, error: unknown, issuer: string): FastifyReply {
  const failure = error instanceof GatewayError ? error : new ServerError(error)
  if (failure.status >= 500) reply.log.error({ err: failure.internal.cause, detail: failure.internal.detail }, 'authorization server error')
  else reply.log.info({ error: failure.code, reason: failure.internal.detail ?? failure.description }, 'authorization server request refused')
  noStore(reply).code(failure.status).header('content-type', 'application/json; charset=utf-8')
  // RFC 6749 §5.2: a client that used the Authorization header gets a challenge for the scheme it used.
  if (failure instanceof InvalidClient && failure.usedAuthorizationHeader) {
    reply.header('www-authenticate', `Basic realm="${issuer.replace(/["\\]/g, '')}", error="invalid_client"`)
  }
  if (failure instanceof MethodNotAllowed) reply.header('allow', failure.allow.join(', '))
  if (failure instanceof TemporarilyUnavailable || failure instanceof TooManyAttempts) {
    reply.header('retry-after', String(failure.retryAfterSeconds))
  }
  return reply.send(JSON.stringify({ error: failure.code, error_description: failure.description }))
}

/**
 * RFC 6749 §3.2: the other methods on a POST-only endpoint get 405 with `Allow: POST`. With `cors` (token
 * and revocation, which browser apps call; RFC 9700 §2.6), OPTIONS answers a CORS preflight instead; the responses themselves
 * get `Access-Control-Allow-Origin: *` from the plugin. No cookies are ever involved, so `*` is safe.
 */
export function refuseOtherMethods(app: FastifyInstance, path: string, allowed: readonly string[], issuer: string,
  options: { cors?: boolean; onRequest?: onRequestAsyncHookHandler | undefined } = {}): void {
  // `onRequest`: what every answer of the endpoint carries, these too (the token endpoint's DPoP-Nonce).
  const hooks = options.onRequest === undefined ? {} : { onRequest: options.onRequest }
  if (options.cors) app.options(path, hooks, (_request, reply) => sendCorsPreflight(reply, allowed))
  const others = ['GET', 'HEAD', 'PUT', 'PATCH', 'DELETE', ...(options.cors ? [] : ['OPTIONS'])].filter((method) => !allowed.includes(method))
  app.route({
    method: others as ('GET' | 'HEAD' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS')[],
    url: path,
    ...hooks,
    handler: (_request, reply) => sendOAuthError(reply, new MethodNotAllowed(allowed), issuer),
  })
}

/** A CORS preflight answer for an endpoint browser apps call with a Bearer token or a form. */
export function sendCorsPreflight(reply: FastifyReply, allowed: readonly string[]): FastifyReply {
  return reply.code(204)
    .header('allow', [...allowed, 'OPTIONS'].join(', '))
    .header('access-control-allow-origin', '*')
    .header('access-control-allow-methods', allowed.join(', '))
    .header('access-control-allow-headers', 'authorization, content-type, dpop')
    .header('access-control-max-age', '86400')
    .send()
}

/** RFC 6749 App. B: the media type must be a form, with or without parameters such as `;charset=UTF-8`. */
export function isForm(contentType: string | undefined): boolean {
  return contentType?.split(';', 1)[0]!.trim().toLowerCase() === 'application/x-www-form-urlencoded'
}

/**
 * An onRequest hook for the form-POST endpoints: credentials in the URI and any body that is not
 * a form are refused before the body is read, so they are never parsed.
 */
export function formPostGuard(issuer: string): onRequestAsyncHookHandler {
  return async (request, reply) => {
    try {
      rejectCredentialsInQuery(request)
      if (!isForm(request.headers['content-type'])) throw new InvalidRequest('the body must be application/x-www-form-urlencoded')
    } catch (error) {
      return sendOAuthError(reply, error, issuer)
    }
    return undefined
  }
}
