/**
 * The consent page of the browser flow (never framed, RFC 9700 §4.16; CSRF-protected, RFC 6749 §10.12):
 * names the client and what each scope gives it, and asks the logged-in user to allow or deny; "remember" saves the decision for this
 * user and client (browser/consent.ts). The answer consumes the interaction, so it counts once, and
 * goes back to the client as a 303 (RFC 9700 §4.12): a code, or access_denied.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AccessDenied } from '../../errors/oauth-errors.js'
import { rememberConsent } from '../browser/consent.js'
import { pageUrl, sendAnsweredPage, sendCode, sendErrorRedirect, sessionSatisfies } from '../browser/flow.js'
import { findInteraction, finishInteraction, type AuthorizationRequest } from '../browser/interaction.js'
import { csrfField, html, pageErrorHandler, sendErrorPage, sendPage, sendRedirect, type SafeHtml } from '../browser/page.js'
import { isLocalRedirectUri } from '../browser/redirect-uri.js'
import { readSession, type BrowserSession } from '../browser/session.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import { parseForm } from '../http.js'

/** What the standard scopes mean to a person; any other scope is shown as its name. */
const SCOPE_TEXT: Readonly<Record<string, string>> = {
  openid: 'Confirm who you are',
  profile: 'Read your profile (name, username, picture)',
  email: 'Read your email address',
  address: 'Read your postal address',
  phone: 'Read your phone number',
  offline_access: 'Keep access while you are away',
}

/** The scope list of a consent page (the device page shows it too). */
export function scopeList(scope: readonly string[]): SafeHtml {
  if (scope.length === 0) return html`<p>It asks for no particular permission.</p>`
  return html`<ul>${scope.map((item) => html`<li>${SCOPE_TEXT[item] ?? item}${SCOPE_TEXT[item] === undefined ? '' : html` <small>(${item})</small>`}</li>`)}</ul>`
}

/** Where the tokens will be used, when the request named RFC 8707 resources (the device page shows it too). */
export function resourceLine(resource: readonly string[] | undefined): SafeHtml {
  if (resource === undefined) return html``
  return html`<p>For use at: ${resource.map((item, index) => html`${index > 0 ? ', ' : ''}<strong>${item}</strong>`)}</p>`
}

/** Where the answer goes, in words: for a client that registered itself, the one thing about it that is not its own claim. */
function destination(redirectUri: string): string {
  const url = new URL(redirectUri)
  if (url.protocol === 'https:') return url.host
  if (url.protocol === 'http:') return `an application on this computer (${url.host})`
  return `an application on this device (${url.protocol})`
}

/** A dynamically registered client (RFC 7591) chose its own name (the device page shows this too). */
export function unverifiedNotice(name: string, redirectUri?: string): SafeHtml {
  return html`<p class="alert"><strong>${name}</strong> registered itself with this server: its name is not verified.
Continue only if you started this from that application${redirectUri !== undefined && html`; it will receive the answer at <strong>${destination(redirectUri)}</strong>`}.</p>`
}

/** A client known by its Client ID Metadata Document is the host that serves it, and no more than that. */
function documentNotice(host: string, redirectUri: string): SafeHtml {
  return html`<p class="alert">This application is identified only by <strong>${host}</strong>, the site that describes it; its name is not verified.
Continue only if you started this from that application; it will receive the answer at <strong>${destination(redirectUri)}</strong>.</p>`
}

/**
 * MCP 2026-07-28 Security Considerations ("Localhost Redirect URI Risks"): a client that introduced
 * itself and can only be answered on this computer may be any program running here, or one an attacker
 * started with a link; the user is the only one who can tell. YAML clients are the operator's: no warning.
 */
function localOnlyWarning(client: RegisteredClient | undefined): SafeHtml | false {
  const selfIntroduced = client?.dynamic !== undefined || client?.metadataDocument !== undefined
  if (!selfIntroduced || client.redirectUris.length === 0 || !client.redirectUris.every(isLocalRedirectUri)) return false
  return html`<p class="alert">This application runs on your own computer. Approve only if you just started it yourself.</p>`
}

async function sendConsentPage(ctx: AuthServerContext, reply: FastifyReply, interactionId: string, request: AuthorizationRequest,
  session: BrowserSession): Promise<FastifyReply> {
  const client = await ctx.clients.lookup(request.clientId)
  const name = client?.name ?? request.clientId
  const body = html`<p>Signed in as <strong>${session.user.username}</strong>.</p>
${client?.dynamic !== undefined && unverifiedNotice(name, request.redirectUri)}
${client?.metadataDocument !== undefined && documentNotice(client.metadataDocument.host, request.redirectUri)}
${localOnlyWarning(client)}
<p><strong>${name}</strong> would like to:</p>
${scopeList(request.scope)}
${resourceLine(request.resource)}
<form method="post" action="${ctx.settings.prefix}/consent">
${csrfField(reply.generateCsrf())}
<input type="hidden" name="interaction" value="${interactionId}">
<label class="check"><input type="checkbox" name="remember" value="1"> Remember this decision for ${name}</label>
<div class="actions">
<button type="submit" name="decision" value="allow" autofocus>Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</div>
</form>`
  return sendPage(reply, { status: 200, title: `Allow access to ${name}?`, body })
}

function expiredPage(reply: FastifyReply): FastifyReply {
  return sendErrorPage(reply, 400, 'Request expired',
    'This authorization request is unknown or has expired. Return to the application and start again.')
}

/** The interaction and a session good enough for it, or the page that says otherwise. */
async function load(ctx: AuthServerContext, request: FastifyRequest, id: string | undefined)
  : Promise<{ request: AuthorizationRequest; session: BrowserSession; id: string } | { redirect: string } | undefined> {
  const interaction = await findInteraction(ctx, id)
  if (!interaction || interaction.kind !== 'authorize' || id === undefined) return undefined
  const session = await readSession(ctx, request)
  // OIDC Core §3.1.2.1: logged out, or not freshly enough for prompt=login / max_age, since the request began.
  if (!sessionSatisfies(ctx, interaction.request, session, interaction.notBefore)) return { redirect: pageUrl(ctx, 'login', id) }
  return { request: interaction.request, session, id }
}

async function decide(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const form = parseForm(request.body)
  const decision = form.get('decision')
  const loaded = await load(ctx, request, form.get('interaction'))
  if (!loaded) return expiredPage(reply)
  if ('redirect' in loaded) return sendRedirect(reply, 'POST', loaded.redirect)
  if (decision !== 'allow' && decision !== 'deny') {
    return sendErrorPage(reply, 400, 'Bad request', 'Choose Allow or Deny. Go back and try again.')
  }
  // Two tabs, a double click: the first answer stands.
  if (!(await finishInteraction(ctx, loaded.id))) return sendAnsweredPage(reply)
  const { request: authorization, session } = loaded
  try {
    const fields = { sub: session.user.sub, client_id: authorization.clientId, scope: authorization.scope.join(' '), ip: request.ip,
      req_id: request.id }
    if (decision === 'deny') {
      request.log.info({ clientId: authorization.clientId, sub: session.user.sub }, 'consent denied')
      ctx.audit.emit('consent.denied', fields)
      return sendErrorRedirect(ctx, reply, 'POST', authorization, new AccessDenied('the user denied the request'))
    }
    const remembered = form.get('remember') === '1'
    if (remembered) await rememberConsent(ctx, session.user.sub, authorization.clientId, authorization.scope, authorization.resource)
    request.log.info({ clientId: authorization.clientId, sub: session.user.sub }, 'consent granted')
    ctx.audit.emit('consent.granted', { ...fields, remembered })
    return await sendCode(ctx, reply, 'POST', authorization, session)
  } catch (error) {
    return sendErrorRedirect(ctx, reply, 'POST', authorization, error)
  }
}

/** Mounts GET and POST `${prefix}/consent`; returns its path. */
export function registerConsent(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/consent`
  app.get(path, { errorHandler: pageErrorHandler }, async (request, reply) => {
    const id = (request.query as Record<string, unknown>).interaction
    const loaded = await load(ctx, request, typeof id === 'string' ? id : undefined)
    if (!loaded) return expiredPage(reply)
    if ('redirect' in loaded) return sendRedirect(reply, 'GET', loaded.redirect)
    return sendConsentPage(ctx, reply, loaded.id, loaded.request, loaded.session)
  })
  app.post(path, { errorHandler: pageErrorHandler, preHandler: app.csrfProtection },
    (request, reply) => decide(ctx, request, reply))
  return [path]
}
