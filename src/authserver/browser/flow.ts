/**
 * Where a validated authorization request goes next, from /authorize, the login form or the consent
 * form: to the login page (no session, prompt=login, max_age passed), to the consent page (no remembered
 * consent, prompt=consent), or back to the client with a code. And how answers go back to the client:
 * `iss` on every one (RFC 9207 §2), `state` echoed exactly when it was sent (RFC 6749 §4.1.2, §4.1.2.1), any
 * query of the registered URI kept byte for byte (RFC 6749 §3.1.2).
 */
import type { FastifyReply } from 'fastify'
import { ConsentRequired, GatewayError, LoginRequired, ServerError } from '../../errors/oauth-errors.js'
import { issueAuthorizationCode } from '../authorization-codes.js'
import type { AuthServerContext } from '../context.js'
import { hasConsent } from './consent.js'
import { finishInteraction, startInteraction, type AuthorizationRequest, type Interaction } from './interaction.js'
import { sendErrorPage, sendRedirect } from './page.js'
import type { BrowserSession } from './session.js'

/** Where the answer goes: the redirect URI, the state to echo, and whether in the fragment (a refused token-bearing response type). */
export interface ResponseTarget {
  readonly redirectUri: string
  readonly state?: string
  readonly fragment?: boolean
}

/** The client's redirect URI with `params`, `state` and `iss` added. */
export function authorizationResponseUrl(ctx: AuthServerContext, target: ResponseTarget, params: Record<string, string>): string {
  const query = new URLSearchParams(params)
  if (target.state !== undefined) query.set('state', target.state)
  query.set('iss', ctx.settings.issuer)
  // Appended as text: re-serialising through URL would re-encode the registered query (RFC 6749 §3.1.2: it is kept).
  if (target.fragment) return `${target.redirectUri}#${query}`
  return `${target.redirectUri}${target.redirectUri.includes('?') ? '&' : '?'}${query}`
}

/** An error after the redirect URI is trusted goes back to the client (RFC 6749 §4.1.2.1), with its description. */
export function sendErrorRedirect(ctx: AuthServerContext, reply: FastifyReply, method: string, target: ResponseTarget,
  error: unknown): FastifyReply {
  const failure = error instanceof GatewayError ? error : new ServerError(error)
  if (failure.status >= 500) reply.log.error({ err: failure.internal.cause }, 'authorization request failed')
  else reply.log.info({ error: failure.code, reason: failure.internal.detail ?? failure.description }, 'authorization request refused')
  return sendRedirect(reply, method, authorizationResponseUrl(ctx, target,
    { error: failure.code, error_description: failure.description }))
}

/** The page URL of a step of an interaction. */
export function pageUrl(ctx: AuthServerContext, page: 'login' | 'consent', interactionId: string): string {
  return `${ctx.settings.prefix}/${page}?interaction=${encodeURIComponent(interactionId)}`
}

/**
 * Whether this session may answer the request without a new login (OIDC Core §3.1.2.1): it must
 * exist, postdate a prompt=login (`notBefore`, ms), and be younger than max_age.
 */
export function sessionSatisfies(ctx: AuthServerContext, request: AuthorizationRequest, session: BrowserSession | undefined,
  notBefore: number | undefined): session is BrowserSession {
  if (!session) return false
  if (notBefore !== undefined && session.loginAt < notBefore) return false
  if (request.maxAge !== undefined && Math.floor(ctx.now() / 1000) - session.authTime > request.maxAge) return false
  return true
}

/** A form submitted twice, or in two tabs: the first answer stands. */
export function sendAnsweredPage(reply: FastifyReply): FastifyReply {
  return sendErrorPage(reply, 400, 'Request already answered',
    'This sign-in request has already been answered. Return to the application to start again.')
}

/** Mints the code for the logged-in user and sends the success redirect (RFC 6749 §4.1.2). */
export async function sendCode(ctx: AuthServerContext, reply: FastifyReply, method: string, request: AuthorizationRequest,
  session: BrowserSession): Promise<FastifyReply> {
  const client = await ctx.clients.lookup(request.clientId)
  if (!client) return sendErrorRedirect(ctx, reply, method, request, new ServerError(new Error('client removed during the interaction')))
  const code = await issueAuthorizationCode(ctx, {
    client,
    redirectUri: request.redirectUri,
    redirectUriWasSent: request.redirectUriWasSent,
    scope: request.scope,
    ...(request.resource !== undefined && { resource: request.resource }),
    sub: session.user.sub,
    authTime: session.authTime,
    ...(request.nonce !== undefined && { nonce: request.nonce }),
    ...(request.codeChallenge !== undefined && { codeChallenge: request.codeChallenge, codeChallengeMethod: 'S256' as const }),
    ...(request.dpopJkt !== undefined && { dpopJkt: request.dpopJkt }),
  })
  return sendRedirect(reply, method, authorizationResponseUrl(ctx, request, { code }))
}

/** A validated authorization request on its way: the browser's session, and the interaction under way, if any. */
export interface PendingAuthorization {
  readonly request: AuthorizationRequest
  readonly session: BrowserSession | undefined
  /** The interaction already under way (from the login page), with its prompt=login instant (ms). */
  readonly interaction?: { readonly id: string; readonly notBefore?: number } | undefined
}

/** The next step of a validated request: login, consent, or the code. */
export async function continueAuthorization(ctx: AuthServerContext, reply: FastifyReply, method: string,
  pending: PendingAuthorization): Promise<FastifyReply> {
  const { request, session, interaction } = pending
  const none = request.prompt.includes('none')
  // max_age=0 is prompt=login (OIDC Core §3.1.2.1): whole-second auth_time could never be "older" than it.
  const forceLogin = request.prompt.includes('login') || request.maxAge === 0
  const notBefore = interaction ? interaction.notBefore : forceLogin ? ctx.now() : undefined
  const start = async () => interaction?.id ?? await startInteraction(ctx, {
    kind: 'authorize', request, ...(notBefore !== undefined && { notBefore }),
  }, reply.request.ip)
  if (!sessionSatisfies(ctx, request, session, notBefore)) {
    // OIDC Core §3.1.2.6: prompt=none never shows a page.
    if (none) return sendErrorRedirect(ctx, reply, method, request, new LoginRequired())
    return sendRedirect(reply, method, pageUrl(ctx, 'login', await start()))
  }
  const remembered = !request.prompt.includes('consent')
    && await hasConsent(ctx, session.user.sub, request.clientId, request.scope, request.resource)
  if (!remembered) {
    if (none) return sendErrorRedirect(ctx, reply, method, request, new ConsentRequired())
    return sendRedirect(reply, method, pageUrl(ctx, 'consent', await start()))
  }
  // An interaction under way is answered once, here or on the consent page, whichever comes first.
  if (interaction && !(await finishInteraction(ctx, interaction.id))) return sendAnsweredPage(reply)
  return sendCode(ctx, reply, method, request, session)
}

/**
 * A user has just logged in (the form, or an identity provider's callback): logged and audited, then a device's user
 * goes back to /device with the code, and an authorization request on to consent or its code.
 * @param provider the `identity_providers[].id` of a federated login
 */
export async function continueAfterLogin(ctx: AuthServerContext, reply: FastifyReply,
  login: { interactionId: string; interaction: Interaction; session: BrowserSession; provider?: string }): Promise<FastifyReply> {
  const { interactionId, interaction, session, provider } = login
  const { request } = reply
  const { user } = session
  request.log.info({ sub: user.sub, ...(provider !== undefined && { provider }) }, 'login succeeded')
  ctx.audit.emit('login.succeeded', {
    sub: user.sub, username: user.username, flow: interaction.kind, ...(provider !== undefined && { provider }),
    ...(interaction.kind === 'authorize' && { client_id: interaction.request.clientId }), ip: request.ip, req_id: request.id,
  })
  if (interaction.kind === 'device') {
    await finishInteraction(ctx, interactionId)
    const query = interaction.userCode !== undefined ? `?user_code=${encodeURIComponent(interaction.userCode)}` : ''
    return sendRedirect(reply, request.method, `${ctx.settings.prefix}/device${query}`)
  }
  return continueAuthorization(ctx, reply, request.method, {
    request: interaction.request,
    session,
    interaction: { id: interactionId, ...(interaction.notBefore !== undefined && { notBefore: interaction.notBefore }) },
  })
}
