/**
 * The device verification page (RFC 8628 §3.3): the user logs in, types the code
 * the device shows (any case, with or without the dash), sees which client asks for what, and approves
 * or denies. `verification_uri_complete` only pre-fills the code: approval is always a separate, explicit
 * POST (§5.4, remote phishing). Wrong codes count per browser session and per address, each from before
 * it is looked up; five in five minutes lock the form (§5.1: 20^8 codes are only about 2^34.6).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { startInteraction } from '../browser/interaction.js'
import { reserveAttempt } from '../browser/lockout.js'
import { csrfField, html, pageErrorHandler, sendPage, sendRedirect } from '../browser/page.js'
import { readSession, type BrowserSession } from '../browser/session.js'
import type { AuthServerContext } from '../context.js'
import { approveDeviceCode, denyDeviceCode, findUserCode, normalizeUserCode } from '../device.js'
import { parseForm } from '../http.js'
import { resourceLine, scopeList, unverifiedNotice } from './consent.js'
import { sendLoginPage } from './login.js'

const MAX_INPUT = 64

function sendEntryPage(ctx: AuthServerContext, reply: FastifyReply, session: BrowserSession,
  options: { userCode?: string; error?: string; status?: number } = {}): FastifyReply {
  const body = html`<p>Signed in as <strong>${session.user.username}</strong>.</p>
<p>Enter the code shown on your device.</p>
${options.error !== undefined && html`<p role="alert" class="alert" id="code-error">${options.error}</p>`}
<form method="post" action="${ctx.settings.prefix}/device">
${csrfField(reply.generateCsrf())}
<label for="user_code">Code</label>
<input type="text" id="user_code" name="user_code" class="code" autocomplete="off" autocapitalize="characters" spellcheck="false"
 required maxlength="${MAX_INPUT}" placeholder="XXXX-XXXX" autofocus
 ${options.userCode !== undefined && html`value="${options.userCode}"`}
 ${options.error !== undefined && html`aria-describedby="code-error"`}>
<div class="actions"><button type="submit">Continue</button></div>
</form>`
  return sendPage(reply, { status: options.status ?? 200, title: 'Connect a device', body })
}

/** Not logged in: the login form, which comes back here (with the pre-filled code) once done. */
async function sendLogin(ctx: AuthServerContext, reply: FastifyReply, userCode: string | undefined): Promise<FastifyReply> {
  const interaction = { kind: 'device' as const, ...(userCode !== undefined && { userCode }) }
  return sendLoginPage(ctx, reply, await startInteraction(ctx, interaction, reply.request.ip), interaction)
}

/**
 * The device request `input` names, when it is pending and, with a decision, that decision was recorded;
 * undefined for an unknown, expired or used code or an unknown decision (a wrong guess).
 */
async function evaluate(ctx: AuthServerContext, session: BrowserSession, input: string, decision: string | undefined) {
  if (decision !== undefined && decision !== 'approve' && decision !== 'deny') return undefined
  // Read before the decision consumes it: the audit line names the client and scope (never the user code).
  const found = await findUserCode(ctx, input)
  if (!found || decision === undefined) return found
  const user = { sub: session.user.sub, authTime: session.authTime }
  const decided = decision === 'approve' ? await approveDeviceCode(ctx, input, user) : await denyDeviceCode(ctx, input)
  return decided ? found : undefined
}

async function submit(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const session = await readSession(ctx, request)
  if (!session) return sendRedirect(reply, 'POST', `${ctx.settings.prefix}/device`)
  const form = parseForm(request.body)
  const input = (form.get('user_code') ?? '').slice(0, MAX_INPUT)
  const decision = form.get('decision')
  // Counted before the code is looked up, so parallel guesses get no more lookups than the allowance.
  const attempt = await reserveAttempt(ctx.userCodeThrottle, [`session:${session.id}`, `ip:${request.ip}`], reply, 'wrong codes')
  if (typeof attempt === 'string') return sendEntryPage(ctx, reply, session, { status: 429, error: attempt })
  const found = await evaluate(ctx, session, input, decision).catch((error: unknown) => {
    attempt.keep()
    throw error
  })
  if (!found) {
    // Unknown, expired and used codes all read the same, and each counts as a failure.
    attempt.keep()
    return sendEntryPage(ctx, reply, session, {
      status: 400, userCode: input, error: 'That code is not valid or has expired. Check the code on your device and try again.',
    })
  }
  await attempt.release()
  if (decision === undefined) {
    const client = await ctx.clients.lookup(found.clientId)
    const name = client?.name ?? found.clientId
    // RFC 8628 §5.4: what the device asks for, and an explicit choice.
    const body = html`<p>Signed in as <strong>${session.user.username}</strong>.</p>
${client?.dynamic !== undefined && unverifiedNotice(name)}
<p>The device showing <strong class="code">${found.userCode}</strong> wants to act as <strong>${name}</strong> and:</p>
${scopeList(found.scope)}
${resourceLine(found.resource)}
<p>Only continue if you started this on a device you own, and the code matches.</p>
<form method="post" action="${ctx.settings.prefix}/device">
${csrfField(reply.generateCsrf())}
<input type="hidden" name="user_code" value="${found.userCode}">
<div class="actions">
<button type="submit" name="decision" value="approve" autofocus>Approve</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</div>
</form>`
    return sendPage(reply, { status: 200, title: `Connect ${name}?`, body })
  }
  request.log.info({ sub: session.user.sub, decision }, 'device code decided')
  ctx.audit.emit(decision === 'approve' ? 'device_code.approved' : 'device_code.denied', {
    sub: session.user.sub, client_id: found.clientId, scope: found.scope.join(' '), ip: request.ip, req_id: request.id,
  })
  const message = decision === 'approve'
    ? html`<p role="status">Your device is connected. You can return to it now.</p>`
    : html`<p role="status">The request was denied. The device gets no access.</p>`
  return sendPage(reply, { status: 200, title: decision === 'approve' ? 'Device connected' : 'Request denied', body: message })
}

/** Mounts GET and POST `${prefix}/device`; returns its path. */
export function registerDevicePage(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/device`
  app.get(path, { errorHandler: pageErrorHandler }, async (request, reply) => {
    const raw = (request.query as Record<string, unknown>).user_code
    // Pre-fill only (RFC 8628 §3.3.1): shown in the form as issued when it parses, as typed (bounded) otherwise.
    const userCode = typeof raw === 'string' && raw !== '' ? normalizeUserCode(raw) ?? raw.slice(0, MAX_INPUT) : undefined
    const session = await readSession(ctx, request)
    if (!session) return sendLogin(ctx, reply, userCode)
    return sendEntryPage(ctx, reply, session, { ...(userCode !== undefined && { userCode }) })
  })
  app.post(path, { errorHandler: pageErrorHandler, preHandler: app.csrfProtection },
    (request, reply) => submit(ctx, request, reply))
  return [path]
}
