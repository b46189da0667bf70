/**
 * The authorization endpoint (RFC 6749 §3.1, §4.1.1), the code flow only (OAuth 2.1 §10.1), GET and form
 * POST alike (RFC 6749 §3.1). Its steps, in order:
 * 1. client_id and redirect_uri: until both are known good, every error is a page, never a redirect
 *    (RFC 6749 §4.1.2.1): redirecting there would make us an open redirector (RFC 9700 §4.11.2).
 * 2. Everything else is checked, and its errors go back to the client (RFC 6749 §4.1.2.1).
 * 3. The validated request goes on to login, consent or the code (browser/flow.ts).
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import {
  InvalidClient, InvalidRequest, RequestNotSupported, RequestUriNotSupported, UnauthorizedClient, UnsupportedResponseType,
} from '../../errors/oauth-errors.js'
import { challengeIsWellFormed } from '../pkce.js'
import { continueAuthorization, sendErrorRedirect, type ResponseTarget } from '../browser/flow.js'
import type { AuthorizationRequest } from '../browser/interaction.js'
import { pageErrorHandler, sendErrorPage, sendPage, html } from '../browser/page.js'
import { matchRedirectUri } from '../browser/redirect-uri.js'
import { readSession } from '../browser/session.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import { isForm } from '../http.js'
import { requestedResources } from '../resource.js'
import { grantScope } from '../scope.js'

/** Parameters as sent: every value of every name, so a repeated one can be refused (RFC 6749 §3.1). */
type Parameters = ReadonlyMap<string, readonly string[]>

const PROMPTS = new Set(['none', 'login', 'consent'])
/** Ample for any honest client; a longer value is refused rather than stored in a code. */
const MAX_NONCE = 512
const MAX_STATE = 2048
/** RFC 9449 §10: dpop_jkt is a JWK SHA-256 thumbprint (RFC 7638), base64url: 43 characters. */
const JKT = /^[A-Za-z0-9_-]{43}$/

function parametersOf(request: FastifyRequest): Parameters {
  const params = new Map<string, string[]>()
  const add = (name: string, value: unknown) => {
    // RFC 6749 §3.1: a parameter sent without a value counts as omitted.
    if (typeof value === 'string' && value !== '') params.set(name, [...(params.get(name) ?? []), value])
  }
  if (request.method === 'POST') {
    for (const [name, value] of Object.entries((request.body ?? {}) as Record<string, unknown>)) {
      for (const item of Array.isArray(value) ? value : [value]) add(name, item)
    }
  } else {
    const url = request.raw.url ?? ''
    const q = url.indexOf('?')
    if (q !== -1) for (const [name, value] of new URLSearchParams(url.slice(q + 1))) add(name, value)
  }
  return params
}

/** The single value of a parameter; a repeated one is `repeated` (invalid_request wherever it is reported). */
function single(params: Parameters, name: string): string | undefined | { repeated: true } {
  const values = params.get(name)
  if (values === undefined) return undefined
  return values.length === 1 ? values[0] : { repeated: true }
}

function one(params: Parameters, name: string): string | undefined {
  const value = single(params, name)
  if (typeof value === 'object') throw new InvalidRequest(`the parameter ${name} is repeated`)
  return value
}

function errorPage(reply: FastifyReply, message: string): FastifyReply {
  return sendErrorPage(reply, 400, 'Invalid sign-in request',
    `${message}. The application that sent you here may be misconfigured; nothing was sent back to it.`)
}

/** What step 1 established: the client, the redirect URI its answer goes to, and the state to echo there. */
interface TrustedRedirect {
  readonly client: RegisteredClient
  readonly redirectUri: string
  /** Whether redirect_uri was sent: /token then requires the same one (RFC 6749 §4.1.3). */
  readonly redirectUriWasSent: boolean
  readonly state: string | undefined
}

/** Step 2: the rest of the request, in a fixed order (the first error found is the one reported); throws what goes back to the client. */
function validate(ctx: AuthServerContext, params: Parameters, trusted: TrustedRedirect): AuthorizationRequest {
  const { client, redirectUri, redirectUriWasSent, state } = trusted
  const { clientId } = client
  if (params.has('request')) throw new RequestNotSupported()
  if (params.has('request_uri')) throw new RequestUriNotSupported()
  const responseType = one(params, 'response_type')
  if (responseType === undefined) throw new InvalidRequest('response_type is required')
  // OAuth 2.1 §10.1: only the code flow; no token ever travels in the front channel.
  if (responseType !== 'code') throw new UnsupportedResponseType(`response_type ${JSON.stringify(responseType.slice(0, 50))} is not supported`)
  const responseMode = one(params, 'response_mode')
  if (responseMode !== undefined && responseMode !== 'query') throw new InvalidRequest('response_mode must be query')
  if (!client.grantTypes.has('authorization_code')) throw new UnauthorizedClient(`client ${clientId} may not use authorization_code`)
  // RFC 6749 §10.12: state is required against CSRF; a client may opt out (`require_state: false`).
  if (state === undefined && client.requireState) throw new InvalidRequest('state is required')
  // What the user may grant it (the consent page lists it); without `scope`, the client's own default.
  const scope = grantScope(one(params, 'scope'), client.consentScopes ?? client.scopes, client.scopes)
  // RFC 8707 §2.1: repeatable, unlike every other parameter; each must be configured, exactly, or it is invalid_target.
  const resource = requestedResources(params.get('resource') ?? [], ctx.settings.resourceIndicators)
  // PKCE (RFC 9700 §2.1.1): S256 only; a challenge without a method would be plain (RFC 7636 §4.3).
  const codeChallenge = one(params, 'code_challenge')
  const method = one(params, 'code_challenge_method')
  if (codeChallenge === undefined) {
    if (method !== undefined) throw new InvalidRequest('code_challenge_method without code_challenge')
    if (client.requirePkce) throw new InvalidRequest('code_challenge is required (PKCE with S256)')
  } else {
    if (method !== 'S256') throw new InvalidRequest('code_challenge_method must be S256')
    if (!challengeIsWellFormed(codeChallenge)) throw new InvalidRequest('malformed code_challenge')
  }
  const nonce = one(params, 'nonce')
  if (nonce !== undefined && nonce.length > MAX_NONCE) throw new InvalidRequest('nonce is too long')
  const dpopJkt = one(params, 'dpop_jkt')
  if (dpopJkt !== undefined && !JKT.test(dpopJkt)) throw new InvalidRequest('dpop_jkt must be a base64url SHA-256 JWK thumbprint')
  const maxAgeText = one(params, 'max_age')
  if (maxAgeText !== undefined && !/^\d{1,10}$/.test(maxAgeText)) throw new InvalidRequest('max_age must be a number of seconds')
  const prompt = [...new Set((one(params, 'prompt') ?? '').split(' ').filter((item) => item !== ''))]
  const unknown = prompt.filter((item) => !PROMPTS.has(item))
  if (unknown.length > 0) throw new InvalidRequest(`unsupported prompt ${unknown.join(' ').slice(0, 50)}`)
  // OIDC Core §3.1.2.1: none with anything else is an error.
  if (prompt.includes('none') && prompt.length > 1) throw new InvalidRequest('prompt=none cannot be combined with other values')
  return {
    clientId,
    redirectUri,
    redirectUriWasSent,
    ...(state !== undefined && { state }),
    scope,
    ...(resource !== undefined && { resource }),
    ...(nonce !== undefined && { nonce }),
    ...(codeChallenge !== undefined && { codeChallenge, codeChallengeMethod: 'S256' as const }),
    ...(dpopJkt !== undefined && { dpopJkt }),
    ...(maxAgeText !== undefined && { maxAge: Number(maxAgeText) }),
    prompt,
  }
}

async function authorize(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = parametersOf(request)
  // Step 1 (RFC 6749 §4.1.2.1): pages only.
  const clientId = single(params, 'client_id')
  if (typeof clientId === 'object') return errorPage(reply, 'The client_id parameter is repeated')
  let client: RegisteredClient | undefined
  try {
    client = clientId === undefined ? undefined : await ctx.clients.lookup(clientId, request.ip)
  } catch (error) {
    // A Client ID Metadata Document that could not be fetched or used. Its redirect URIs are unknown: a page.
    if (error instanceof InvalidClient) {
      request.log.info({ clientId, reason: error.internal.detail }, 'client_id metadata document refused')
      return errorPage(reply, 'The application\'s client ID metadata document could not be used (invalid_client)')
    }
    // A registration could not be read (the store is down): nothing is known about this client yet, so a page.
    return pageErrorHandler(error as FastifyError, request, reply)
  }
  if (clientId === undefined || !client) return errorPage(reply, 'The application is not registered here')
  const presented = single(params, 'redirect_uri')
  if (typeof presented === 'object') return errorPage(reply, 'The redirect_uri parameter is repeated')
  const redirect = matchRedirectUri(client, presented)
  if (!redirect.ok) {
    request.log.info({ clientId, reason: redirect.reason }, 'authorization request refused with an error page')
    return errorPage(reply, 'The address to return to is not registered for this application')
  }
  // Step 2: from here on the client hears of every error, with its state and our iss (RFC 9207 §2).
  const stateValue = single(params, 'state')
  const state = typeof stateValue === 'string' && stateValue.length <= MAX_STATE ? stateValue : undefined
  const responseType = single(params, 'response_type')
  const target: ResponseTarget = {
    redirectUri: redirect.redirectUri,
    ...(state !== undefined && { state }),
    // A token-bearing response type's default mode is the fragment (OAuth 2.0 Multiple Response Type Encoding Practices), so its refusal goes there.
    fragment: typeof responseType === 'string' && /(^| )(token|id_token)( |$)/.test(responseType),
  }
  let validated: AuthorizationRequest
  try {
    if (typeof stateValue === 'object') throw new InvalidRequest('the parameter state is repeated')
    if (stateValue !== undefined && state === undefined) throw new InvalidRequest('state is too long')
    validated = validate(ctx, params, { client, redirectUri: redirect.redirectUri, redirectUriWasSent: redirect.wasSent, state })
  } catch (error) {
    return sendErrorRedirect(ctx, reply, request.method, target, error)
  }
  // Step 3.
  try {
    // A registered client that sent a valid request is in use: it no longer expires unused.
    await client.dynamic?.recordUse()
    return await continueAuthorization(ctx, reply, request.method, { request: validated, session: await readSession(ctx, request) })
  } catch (error) {
    return sendErrorRedirect(ctx, reply, request.method, target, error)
  }
}

/** Mounts GET and POST `${prefix}/authorize`; returns its path. */
export function registerAuthorize(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/authorize`
  app.route({
    method: ['GET', 'POST'],
    url: path,
    // A POST body that is not a form, or cannot be read: nothing in it can be trusted, so a page.
    errorHandler: (error: FastifyError, request, reply) => {
      request.log.info({ err: error }, 'unreadable authorization request')
      return errorPage(reply, 'The request could not be read')
    },
    onRequest: async (request, reply) => {
      if (request.method === 'POST' && !isForm(request.headers['content-type'])) {
        return errorPage(reply, 'The request must be a form (application/x-www-form-urlencoded)')
      }
      return undefined
    },
    handler: (request, reply) => authorize(ctx, request, reply),
  })
  app.route({
    method: ['PUT', 'PATCH', 'DELETE', 'OPTIONS'],
    url: path,
    handler: (_request, reply) => sendPage(reply.header('allow', 'GET, HEAD, POST'), {
      status: 405, title: 'Method not allowed', body: html`<p>Use GET or POST.</p>`,
    }),
  })
  return [path]
}
