/**
 * Sign-in at an identity provider (`identity_providers[]`): `GET <issuer>/login/<id>?interaction=…` starts it (the
 * chooser's button, or the login step itself when the provider is the only way in), and `GET <issuer>/callback/<id>`
 * finishes it. Between the two, the browser is the provider's. The callback's every failure ends in a page that
 * says what happened (with a way to try again while the request is alive) or, when the user or the provider
 * refused, in the client's `error=access_denied` redirect: never a 500.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AccessDenied } from '../../errors/oauth-errors.js'
import { continueAfterLogin, sendErrorRedirect } from '../browser/flow.js'
import { findInteraction, finishInteraction, type Interaction } from '../browser/interaction.js'
import { html, pageErrorHandler, sendErrorPage, sendPage, sendRedirect } from '../browser/page.js'
import { startSession } from '../browser/session.js'
import type { AuthServerContext } from '../context.js'
import { UpstreamLoginError } from '../federation/connector.js'
import { callbackUrl, startUpstreamLogin, takeUpstreamLogin } from '../federation/flow.js'
import { mapIdentity } from '../federation/identity.js'
import type { FederatedProvider } from '../federation/providers.js'

/** The sign-in step's page for an interaction: the chooser, the form, or (one provider, no form) the provider itself. */
export function loginStepUrl(ctx: AuthServerContext, interactionId: string): string {
  return `${ctx.settings.prefix}/login?interaction=${encodeURIComponent(interactionId)}`
}

export function expiredPage(reply: FastifyReply): FastifyReply {
  return sendErrorPage(reply, 400, 'Sign-in expired',
    'This sign-in request is unknown or has expired. Return to the application or device and start again.')
}

/** A page about a failed sign-in at the provider, with a link that tries again from the sign-in step. */
function failurePage(ctx: AuthServerContext, reply: FastifyReply, page: { status: number; title: string; message: string; interactionId: string }): FastifyReply {
  return sendPage(reply, {
    status: page.status, title: page.title,
    body: html`<p role="alert" class="alert">${page.message}</p>
<p><a href="${loginStepUrl(ctx, page.interactionId)}">Try again</a></p>`,
  })
}

/** Sends the browser to the provider for this interaction: prompt=login and max_age go along (OIDC Core §3.1.2.1). */
export async function startFederatedLogin(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply,
  target: { provider: FederatedProvider; interactionId: string; interaction: Interaction }): Promise<FastifyReply> {
  const { provider, interactionId, interaction } = target
  // Every start writes a record: counted per address as interactions are, so no one fills the store with them.
  const attempt = await ctx.interactionThrottle.reserve([`ip:${request.ip}`])
  attempt.keep()
  const authorize = interaction.kind === 'authorize' ? interaction : undefined
  const upstream = await startUpstreamLogin(ctx, request, reply, {
    provider: provider.settings.id,
    interactionId,
    forceLogin: authorize?.notBefore !== undefined,
    maxAge: authorize?.request.maxAge,
  })
  let location: URL
  try {
    location = await provider.connector.authorizationUrl(upstream)
  } catch (error) {
    const failure = error instanceof UpstreamLoginError ? error : new UpstreamLoginError(String(error), true)
    request.log.warn({ provider: provider.settings.id, reason: failure.message }, 'identity provider unavailable')
    return failurePage(ctx, reply, {
      status: 502, title: 'Sign-in unavailable', interactionId,
      message: `${provider.settings.name} cannot be reached right now. Try again in a moment.`,
    })
  }
  return sendRedirect(reply, request.method, location.href)
}

/** The user or the provider said no: the client hears access_denied (its request is answered); a device's user reads a page. */
async function refuse(ctx: AuthServerContext, reply: FastifyReply, interactionId: string, interaction: Interaction,
  description: string): Promise<FastifyReply> {
  if (!(await finishInteraction(ctx, interactionId))) return expiredPage(reply)
  if (interaction.kind === 'device') return sendErrorPage(reply, 403, 'Sign-in refused', `${description}. Nothing was approved.`)
  return sendErrorRedirect(ctx, reply, 'GET', interaction.request, new AccessDenied(description))
}

const CALLBACK_REFUSALS = {
  unknown: 'This sign-in response is unknown or has expired. Return to the application and sign in again.',
  replayed: 'This sign-in response was already used. Return to the application and sign in again.',
  other_browser: 'This sign-in was started in another browser. Return to the application and sign in again from here.',
  other_provider: 'This sign-in response came back for another provider. Return to the application and sign in again.',
} as const

async function callback(ctx: AuthServerContext, provider: FederatedProvider, request: FastifyRequest,
  reply: FastifyReply): Promise<FastifyReply> {
  const id = provider.settings.id
  const raw = request.raw.url ?? ''
  // Our own callback URL with the parameters the provider sent: the redirect_uri the code was issued for.
  const url = new URL(callbackUrl(ctx, id))
  url.search = raw.includes('?') ? raw.slice(raw.indexOf('?')) : ''
  const state = url.searchParams.get('state')
  if (state === null || state === '') return sendErrorPage(reply, 400, 'Sign-in incomplete', CALLBACK_REFUSALS.unknown)
  const taken = await takeUpstreamLogin(ctx, request, id, state)
  if (!taken.ok) {
    request.log.info({ provider: id, reason: taken.reason }, 'identity provider callback refused')
    ctx.audit.emit('federation.failed', { provider: id, reason: `callback_${taken.reason}`, ip: request.ip, req_id: request.id })
    return sendErrorPage(reply, 400, 'Sign-in cannot be completed', CALLBACK_REFUSALS[taken.reason])
  }
  const { interactionId } = taken.login
  const interaction = await findInteraction(ctx, interactionId)
  if (!interaction) return expiredPage(reply)
  const upstreamError = url.searchParams.get('error')
  if (upstreamError !== null) {
    const code = upstreamError.slice(0, 64)
    request.log.info({ provider: id, error: code }, 'identity provider refused the sign-in')
    ctx.audit.emit('federation.failed', { provider: id, reason: 'upstream_error', error: code, ip: request.ip, req_id: request.id })
    if (code === 'access_denied') return refuse(ctx, reply, interactionId, interaction, `${provider.settings.name} refused the sign-in`)
    const unavailable = code === 'temporarily_unavailable' || code === 'server_error'
    return failurePage(ctx, reply, {
      status: unavailable ? 502 : 400, title: 'Sign-in failed', interactionId,
      message: unavailable ? `${provider.settings.name} is unavailable right now. Try again in a moment.`
        : `${provider.settings.name} could not sign you in (${code}). If this persists, tell the administrator.`,
    })
  }
  let identity
  try {
    identity = await provider.connector.finish(url, taken.login.request)
  } catch (error) {
    const failure = error instanceof UpstreamLoginError ? error : new UpstreamLoginError(String(error), false)
    request.log.warn({ provider: id, reason: failure.message, unavailable: failure.unavailable }, 'identity provider sign-in failed')
    ctx.audit.emit('federation.failed', { provider: id, reason: failure.unavailable ? 'upstream_unavailable' : 'upstream_response_refused', ip: request.ip, req_id: request.id })
    return failurePage(ctx, reply, {
      status: failure.unavailable ? 502 : 400, title: 'Sign-in failed', interactionId,
      message: failure.unavailable ? `${provider.settings.name} is not answering. Try again in a moment.`
        : `The sign-in with ${provider.settings.name} could not be completed. Try again.`,
    })
  }
  const mapped = mapIdentity(provider.settings, identity.claims)
  if (!mapped.ok) {
    request.log.info({ provider: id, reason: mapped.reason }, 'identity provider user refused')
    ctx.audit.emit('federation.failed', { provider: id, reason: 'not_allowed', detail: mapped.reason, ip: request.ip, req_id: request.id })
    return refuse(ctx, reply, interactionId, interaction, `this ${provider.settings.name} account may not sign in here`)
  }
  const user = { ...mapped.user, provider: id }
  await ctx.accounts.save(user, provider.settings.refreshCheck ? identity.credential : undefined)
  const session = await startSession(ctx, request, reply, user, {
    authTime: identity.authTime,
    upstreamIdToken: provider.settings.logoutUpstream ? identity.idToken : undefined,
  })
  return continueAfterLogin(ctx, reply, { interactionId, interaction, session, provider: id })
}

/** Mounts `<issuer>/login/<id>` and `<issuer>/callback/<id>` for every provider; returns their paths. */
export function registerFederatedLogin(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const paths: string[] = []
  for (const provider of ctx.identityProviders.list()) {
    const start = `${ctx.settings.prefix}/login/${provider.settings.id}`
    const finish = `${ctx.settings.prefix}/callback/${provider.settings.id}`
    app.get(start, { errorHandler: pageErrorHandler }, async (request, reply) => {
      const value = (request.query as Record<string, unknown>).interaction
      const interactionId = typeof value === 'string' ? value : undefined
      const interaction = await findInteraction(ctx, interactionId)
      if (!interaction || interactionId === undefined) return expiredPage(reply)
      return startFederatedLogin(ctx, request, reply, { provider, interactionId, interaction })
    })
    app.get(finish, { errorHandler: pageErrorHandler }, (request, reply) => callback(ctx, provider, request, reply))
    paths.push(start, finish)
  }
  return paths
}
