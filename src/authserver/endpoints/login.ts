/**
 * The login page: a form for username and password, reached from /authorize or
 * /device with an interaction id. A failed login says the same for an unknown user and a wrong password,
 * in the same time (UserDirectory.verify), and counts against the username and the address in the same
 * throttle as the token endpoint (RFC 6749 §4.3.2), from before the password is checked; past the
 * limit the form answers 429 with a lockout message. A success starts a new session (browser/session.ts)
 * and continues the interaction.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { continueAfterLogin } from '../browser/flow.js'
import { findInteraction, type Interaction } from '../browser/interaction.js'
import { reserveAttempt } from '../browser/lockout.js'
import { csrfField, html, pageErrorHandler, sendPage } from '../browser/page.js'
import { startSession } from '../browser/session.js'
import type { AuthServerContext } from '../context.js'
import { parseForm } from '../http.js'
import { expiredPage, startFederatedLogin } from './federated-login.js'

/** Longer than any configured username can be (the schema allows 255). */
const MAX_USERNAME = 255
const MAX_PASSWORD = 1024

export interface LoginPageOptions {
  readonly status?: number
  readonly error?: string
  readonly username?: string
}

/** Who the user is signing in for, in words. */
async function purpose(ctx: AuthServerContext, interaction: Interaction): Promise<string> {
  if (interaction.kind === 'device') return 'Sign in to connect a device.'
  const client = await ctx.clients.lookup(interaction.request.clientId)
  return `Sign in to continue to ${client?.name ?? interaction.request.clientId}.`
}

/** The providers' buttons: links to each provider's start (federated-login.ts). */
function providerButtons(ctx: AuthServerContext, interactionId: string) {
  return ctx.identityProviders.list().map(({ settings }) => html`<p><a class="button" id="provider-${settings.id}"
 href="${ctx.settings.prefix}/login/${settings.id}?interaction=${encodeURIComponent(interactionId)}">Continue with ${settings.name}</a></p>
`)
}

/**
 * The sign-in step; /device shows it too, for a visitor who is not logged in. The configured identity
 * providers' buttons, and the form when `users[]` lists anyone (or no provider is configured). One provider and
 * no form: the browser goes straight to the provider.
 */
export async function sendLoginPage(ctx: AuthServerContext, reply: FastifyReply, interactionId: string, interaction: Interaction,
  options: LoginPageOptions = {}): Promise<FastifyReply> {
  const providers = ctx.identityProviders
  const withForm = ctx.users.size > 0 || providers.size === 0
  if (!withForm && providers.size === 1) {
    return startFederatedLogin(ctx, reply.request, reply, { provider: providers.list()[0]!, interactionId, interaction })
  }
  const form = html`<form method="post" action="${ctx.settings.prefix}/login">
${csrfField(reply.generateCsrf())}
<input type="hidden" name="interaction" value="${interactionId}">
<label for="username">Username</label>
<input type="text" id="username" name="username" autocomplete="username" autocapitalize="none" spellcheck="false" required
 ${options.username === undefined && providers.size === 0 ? html`autofocus` : options.username !== undefined && html`value="${options.username}"`}
 ${options.error !== undefined && html`aria-describedby="login-error"`}>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required
 ${options.username !== undefined && html`autofocus`}>
<div class="actions"><button type="submit">Sign in</button></div>
</form>`
  const body = html`<p>${await purpose(ctx, interaction)}</p>
${options.error !== undefined && html`<p role="alert" class="alert" id="login-error">${options.error}</p>`}
${providerButtons(ctx, interactionId)}
${providers.size > 0 && withForm && html`<p class="or">or sign in with a password:</p>`}
${withForm && form}`
  return sendPage(reply, { status: options.status ?? 200, title: 'Sign in', body })
}

async function login(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = parseForm(request.body)
  const interactionId = form.get('interaction')
  const interaction = await findInteraction(ctx, interactionId)
  if (!interaction || interactionId === undefined) return expiredPage(reply)
  const username = (form.get('username') ?? '').slice(0, MAX_USERNAME)
  const password = form.get('password') ?? ''
  if (username === '' || password === '' || password.length > MAX_PASSWORD) {
    return sendLoginPage(ctx, reply, interactionId, interaction, { status: 400, error: 'Enter your username and password.', username })
  }
  const attempt = await reserveAttempt(ctx.throttle, [`user:${username}`, `ip:${request.ip}`], reply, 'failed sign-in attempts')
  if (typeof attempt === 'string') return sendLoginPage(ctx, reply, interactionId, interaction, { status: 429, username, error: attempt })
  const user = await ctx.users.verify(username, password).catch((error: unknown) => {
    attempt.keep()
    throw error
  })
  if (!user) {
    attempt.keep()
    request.log.info({ username: username.slice(0, 64) }, 'login failed')
    ctx.audit.emit('login.failed', { username: username.slice(0, 64), reason: 'invalid_credentials', ip: request.ip, req_id: request.id })
    // One message for an unknown user and a wrong password: no enumeration.
    return sendLoginPage(ctx, reply, interactionId, interaction, { status: 401, error: 'Wrong username or password.', username })
  }
  await attempt.release()
  const session = await startSession(ctx, request, reply, user)
  return continueAfterLogin(ctx, reply, { interactionId, interaction, session })
}

/** Mounts GET and POST `${prefix}/login`; returns its path. */
export function registerLogin(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/login`
  app.get(path, { errorHandler: pageErrorHandler }, async (request, reply) => {
    const interactionId = (request.query as Record<string, unknown>).interaction
    const id = typeof interactionId === 'string' ? interactionId : undefined
    const interaction = await findInteraction(ctx, id)
    if (!interaction || id === undefined) return expiredPage(reply)
    return sendLoginPage(ctx, reply, id, interaction)
  })
  app.post(path, { errorHandler: pageErrorHandler, preHandler: app.csrfProtection },
    (request, reply) => login(ctx, request, reply))
  return [path]
}
