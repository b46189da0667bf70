/**
 * Dynamic client registration (RFC 7591, RFC 7592) at `{issuer}/register` when `registration.enabled`:
 * - POST, a JSON body (RFC 7591 §3.1): the initial access token when one is configured (before the body is
 *   read) → the registrations allowed per address → the metadata against the policy (registration/policy.ts)
 *   → a new client: 201 with its information (§3.2.1), its client_secret and registration access token
 *   shown this once (the store keeps hashes).
 * - GET, PUT and DELETE `?client_id=…` (RFC 7592 §2.1–§2.3; the query form of the client configuration
 *   endpoint, §2) with the registration access token as a Bearer token: read (200), update (200: the metadata
 *   replaced, checked against the policy as a registration is) or delete (204). A wrong token and an unknown
 *   client are the same 401 invalid_token.
 * JSON bodies only, at most 32 KiB, parsed in a scope of their own: every other endpoint takes forms only.
 * Every answer is no-store; errors are RFC 7591 §3.2.2 JSON, with a Bearer challenge when a token is at fault.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { extractBearerToken } from '../../authn/bearer.js'
import { challengeFor } from '../../errors/render.js'
import {
  GatewayError, InvalidClientMetadata, InvalidToken, MethodNotAllowed, MissingToken, ServerError, TooManyAttempts,
} from '../../errors/oauth-errors.js'
import type { AuthServerContext, Throttle } from '../context.js'
import { noStore, sendCorsPreflight, sendOAuthError } from '../http.js'
import { checkClientMetadata, type RegistrationSettings } from '../registration/policy.js'
import type { NewRegistration, RegistrationRecord, Registrations } from '../registration/registrations.js'
import { verifyThrottled } from '../throttle.js'
import { verifySecret } from '../../crypto/secret-hash.js'

/** Ample for the largest policy (100 redirect URIs of 2000 characters would not fit; 5 of them do, many times). */
const BODY_LIMIT = 32 * 1024
/** Longer than any token this server issues or an operator would configure. */
const MAX_TOKEN = 4096
const METHODS = ['POST', 'GET', 'PUT', 'DELETE']

export interface RegistrationEndpointOptions {
  readonly registrations: Registrations
  /** Registrations per client address per window (`registration.rate`). */
  readonly throttle: Throttle
}

const sha256 = (value: string) => createHash('sha256').update(value).digest()

/** The one error writer here: sendOAuthError, plus RFC 6750 §3's challenge when a token was missing or wrong. */
function sendError(reply: FastifyReply, error: unknown, issuer: string): FastifyReply {
  const challenge = error instanceof MissingToken || error instanceof InvalidToken ? challengeFor(error, issuer) : undefined
  if (challenge !== undefined) reply.header('www-authenticate', challenge)
  return sendOAuthError(reply, error, issuer)
}

/** Fastify's own refusals of a body (too large, unreadable) as RFC 7591 §3.2.2 errors. */
function asRegistrationError(error: FastifyError): unknown {
  if (error instanceof GatewayError) return error
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new InvalidClientMetadata(`the body must be at most ${BODY_LIMIT / 1024} KiB`)
  if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    return new InvalidClientMetadata('the body must be a JSON object (application/json)')
  }
  return new ServerError(error)
}

function isJson(contentType: string | undefined): boolean {
  return contentType?.split(';', 1)[0]!.trim().toLowerCase() === 'application/json'
}

/** The client information response (RFC 7591 §3.2.1, RFC 7592 §3): what is registered, and how to manage it. */
function clientInformation(ctx: AuthServerContext, clientId: string, record: RegistrationRecord,
  secrets: { clientSecret?: string; registrationAccessToken: string }): Record<string, unknown> {
  const base = new URL(ctx.settings.issuer).origin + ctx.settings.prefix
  const confidential = record.metadata.token_endpoint_auth_method !== 'none'
  return {
    client_id: clientId,
    client_id_issued_at: record.issuedAt,
    ...(secrets.clientSecret !== undefined && { client_secret: secrets.clientSecret }),
    // The secret never expires (RFC 7591 §3.2.1: 0); it is not shown again, so a read says only this.
    ...(confidential && { client_secret_expires_at: 0 }),
    ...record.metadata,
    registration_access_token: secrets.registrationAccessToken,
    registration_client_uri: `${base}/register?client_id=${encodeURIComponent(clientId)}`,
  }
}

function sendJson(reply: FastifyReply, status: number, body: unknown): FastifyReply {
  return noStore(reply).code(status).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
}

/** Mounts `${prefix}/register` (POST, GET, PUT, DELETE; OPTIONS for CORS; 405 otherwise); returns its path. */
export function registerRegistration(app: FastifyInstance, ctx: AuthServerContext, options: RegistrationEndpointOptions): string[] {
  const settings: RegistrationSettings = ctx.settings.registration!
  const { issuer, prefix } = ctx.settings
  const path = `${prefix}/register`
  const { registrations, throttle } = options

  /** RFC 7591 §3: a wrong initial access token counts as a failed authentication of the address (`throttling`). */
  async function checkInitialAccessToken(request: FastifyRequest): Promise<void> {
    const expected = settings.initialAccessToken
    if (expected === undefined) return
    const token = extractBearerToken(request.raw, MAX_TOKEN)
    if (token === undefined) throw new MissingToken()
    const matches = await verifyThrottled(ctx.throttle, [`ip:${request.ip}`], async () => timingSafeEqual(sha256(token), sha256(expected)))
    if (!matches) throw new InvalidToken('wrong initial access token')
  }

  async function register(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const attempt = await throttle.reserve([`ip:${request.ip}`]).catch((error: unknown) => {
      if (!(error instanceof TooManyAttempts)) throw error
      throw new TooManyAttempts(error.retryAfterSeconds, error.internal.detail ?? 'registration rate', 'too many registrations from this address; retry later')
    })
    let created: NewRegistration
    try {
      let body: unknown
      try {
        body = JSON.parse(request.body as string)
      } catch {
        throw new InvalidClientMetadata('the body is not valid JSON')
      }
      created = await registrations.create(checkClientMetadata(body, settings, ctx.settings.algorithm))
    } catch (error) {
      // Refused: nothing was stored, and the address keeps its allowance.
      await attempt.release()
      throw error
    }
    attempt.keep()
    const { clientId, record } = created
    const { metadata } = record
    request.log.info({ clientId, authMethod: metadata.token_endpoint_auth_method }, 'client registered')
    ctx.audit.emit('client.registered', {
      client_id: clientId, ...(metadata.client_name !== undefined && { client_name: metadata.client_name }),
      token_endpoint_auth_method: metadata.token_endpoint_auth_method, grant_types: metadata.grant_types,
      redirect_uris: metadata.redirect_uris, scope: metadata.scope,
      ...(metadata.software_id !== undefined && { software_id: metadata.software_id }),
      ...(metadata.software_version !== undefined && { software_version: metadata.software_version }),
      ip: request.ip, req_id: request.id,
    })
    return sendJson(reply, 201, clientInformation(ctx, clientId, record, created))
  }

  /** The registration a request manages, by its `client_id` and registration access token. */
  async function managed(request: FastifyRequest): Promise<{ clientId: string; record: RegistrationRecord; token: string }> {
    const token = extractBearerToken(request.raw, MAX_TOKEN)
    if (token === undefined) throw new MissingToken()
    const clientId = (request.query as Record<string, unknown>).client_id
    const record = typeof clientId === 'string' ? await registrations.authorize(clientId, token) : undefined
    // RFC 7592 §2.1: an unknown client and a wrong token are both 401; which one is not said.
    if (!record || typeof clientId !== 'string') throw new InvalidToken('unknown client or wrong registration access token')
    return { clientId, record, token }
  }

  /**
   * RFC 7592 §2.2: the body is the client's whole metadata (what it leaves out is no longer registered), checked as
   * a registration is. It names the client (`client_id`, which must be this one) and may carry the client's secret
   * (which must then be its own); what the server sets (the registration access token and URI, the issue and
   * expiry times) is ignored. The authentication method cannot change: a new secret would have to be issued, or
   * one dropped; such a client registers anew.
   */
  async function update(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const { clientId, record, token } = await managed(request)
    let body: unknown
    try {
      body = JSON.parse(request.body as string)
    } catch {
      throw new InvalidClientMetadata('the body is not valid JSON')
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidClientMetadata('the body must be a JSON object')
    const {
      client_id: named, client_secret: secret, registration_access_token: _token, registration_client_uri: _uri,
      client_id_issued_at: _issued, client_secret_expires_at: _expires, ...fields
    } = body as Record<string, unknown>
    if (named !== clientId) throw new InvalidClientMetadata('client_id must be the registered client\'s (RFC 7592 section 2.2)')
    if (secret !== undefined && (typeof secret !== 'string' || record.secretHash === undefined || !await verifySecret(secret, record.secretHash))) {
      throw new InvalidClientMetadata('client_secret is not the registered client\'s')
    }
    const metadata = checkClientMetadata(fields, settings, ctx.settings.algorithm)
    if (metadata.token_endpoint_auth_method !== record.metadata.token_endpoint_auth_method) {
      throw new InvalidClientMetadata('token_endpoint_auth_method cannot change: register a new client')
    }
    const updated = await registrations.update(clientId, record, metadata)
    if (updated === undefined) throw new InvalidToken('unknown client or wrong registration access token')
    request.log.info({ clientId }, 'client registration updated')
    ctx.audit.emit('client.registration_updated', {
      client_id: clientId, grant_types: metadata.grant_types, redirect_uris: metadata.redirect_uris, scope: metadata.scope, ip: request.ip, req_id: request.id,
    })
    return sendJson(reply, 200, clientInformation(ctx, clientId, updated, { registrationAccessToken: token }))
  }

  async function manage(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const { clientId, record, token } = await managed(request)
    if (request.method === 'DELETE') {
      await registrations.delete(clientId)
      request.log.info({ clientId }, 'client registration deleted')
      ctx.audit.emit('client.registration_deleted', { client_id: clientId, ip: request.ip, req_id: request.id })
      return noStore(reply).code(204).send()
    }
    return sendJson(reply, 200, clientInformation(ctx, clientId, record, { registrationAccessToken: token }))
  }

  void app.register(async (scope) => {
    scope.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: BODY_LIMIT }, (_request, body, done) => done(null, body))
    scope.setErrorHandler((error: FastifyError, _request, reply) => sendError(reply, asRegistrationError(error), issuer))
    scope.route({
      method: 'POST',
      url: path,
      // The content type and the initial access token are checked before the body is read.
      onRequest: async (request, reply) => {
        try {
          if (!isJson(request.headers['content-type'])) throw new InvalidClientMetadata('the body must be application/json (RFC 7591 section 3.1)')
          await checkInitialAccessToken(request)
        } catch (error) {
          return sendError(reply, error, issuer)
        }
        return undefined
      },
      handler: register,
    })
    scope.route({ method: ['GET', 'DELETE'], url: path, handler: manage })
    scope.route({
      method: 'PUT',
      url: path,
      onRequest: async (request, reply) => {
        if (!isJson(request.headers['content-type'])) return sendError(reply, new InvalidClientMetadata('the body must be application/json (RFC 7592 section 2.2)'), issuer)
        return undefined
      },
      handler: update,
    })
    // Browser apps register too (an MCP client in a web page); no cookie is involved, so `*` is safe.
    scope.options(path, (_request, reply) => sendCorsPreflight(reply, METHODS))
    scope.route({ method: 'PATCH', url: path, handler: (_request, reply) => sendError(reply, new MethodNotAllowed(METHODS), issuer) })
  })
  return [path]
}
