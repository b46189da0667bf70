/**
 * OpenID Connect RP-Initiated Logout 1.0: `<issuer>/logout` (GET and form POST, §2) ends this browser's session.
 * - `id_token_hint` is one of our ID tokens (signature and `iss` checked; an expired one is fine, §2); `client_id`,
 *   when both are sent, must be its `aud`.
 * - `post_logout_redirect_uri` must be one the client registered (`clients[].post_logout_redirect_uris`), exactly
 *   (§3.1); anything else is an error page, never a redirect (no open redirector). `state` goes back with it (§3).
 * - The user is asked first (§2: the logout must be what they want), unless `id_token_hint` names the signed-in
 *   user. The confirmation is a form with our CSRF token.
 * - A session from an identity provider with `logout.upstream` is ended there too: the browser goes to the
 *   provider's end_session_endpoint with its ID token, and comes back to `<issuer>/logout/callback` before it goes on.
 */
import { compactVerify, decodeProtectedHeader } from 'jose'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { tokenHash } from '../../authn/token-cache.js'
import { SESSION_COOKIE } from '../../common/token-formats.js'
import { csrfField, html, pageErrorHandler, sendErrorPage, sendPage, sendRedirect } from '../browser/page.js'
import { cookieOptions, endSession, readSession, type BrowserSession } from '../browser/session.js'
import type { AuthServerContext } from '../context.js'
import { parseForm } from '../http.js'
import { randomToken } from '../random.js'

const MAX_PARAMETER = 4096
const LOGOUT_STATE_TTL_SECONDS = 600

interface LogoutRequest {
  readonly hintSub?: string
  readonly clientId?: string
  readonly redirect?: string
  readonly raw: Readonly<Record<string, string>>
}

function parametersOf(request: FastifyRequest): ReadonlyMap<string, string> {
  if (request.method === 'POST') return parseForm(request.body)
  const raw = request.raw.url ?? ''
  return new Map(new URLSearchParams(raw.includes('?') ? raw.slice(raw.indexOf('?') + 1) : ''))
}

/** The `sub` and `aud` of one of our ID tokens, or undefined when it is not one (expiry aside). */
async function hintOf(ctx: AuthServerContext, token: string): Promise<{ sub: string; aud: string } | undefined> {
  try {
    const header = decodeProtectedHeader(token)
    if (header.typ !== 'JWT') return undefined
    const { payload } = await compactVerify(token, ctx.keys.getKey)
    const claims = JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>
    const aud = Array.isArray(claims.aud) && claims.aud.length === 1 ? claims.aud[0] : claims.aud
    if (claims.iss !== ctx.settings.issuer || typeof claims.sub !== 'string' || typeof aud !== 'string') return undefined
    return { sub: claims.sub, aud }
  } catch {
    return undefined
  }
}

/** The checked request, or the error page's message. */
async function validate(ctx: AuthServerContext, params: ReadonlyMap<string, string>): Promise<LogoutRequest | string> {
  for (const [name, value] of params) if (value.length > MAX_PARAMETER) return `the parameter ${name.slice(0, 40)} is too long`
  const hintText = params.get('id_token_hint')
  const hint = hintText !== undefined && hintText !== '' ? await hintOf(ctx, hintText) : undefined
  if (hintText !== undefined && hintText !== '' && !hint) return 'id_token_hint is not an ID token this server issued'
  const sentClientId = params.get('client_id') || undefined
  if (hint && sentClientId !== undefined && sentClientId !== hint.aud) return 'client_id is not the audience of id_token_hint'
  const clientId = sentClientId ?? hint?.aud
  const redirect = params.get('post_logout_redirect_uri') || undefined
  if (redirect !== undefined) {
    const client = clientId !== undefined ? await ctx.clients.lookup(clientId) : undefined
    if (!client) return 'post_logout_redirect_uri needs client_id or id_token_hint to name a client'
    if (!(client.postLogoutRedirectUris ?? []).includes(redirect)) return 'post_logout_redirect_uri is not registered for this client'
  }
  const raw: Record<string, string> = {}
  for (const name of ['id_token_hint', 'client_id', 'post_logout_redirect_uri', 'state']) {
    const value = params.get(name)
    if (value !== undefined && value !== '') raw[name] = value
  }
  return { ...(hint && { hintSub: hint.sub }), ...(clientId !== undefined && { clientId }), ...(redirect !== undefined && { redirect }), raw }
}

/** Where the browser goes once logged out: the client's URI with `state` (§3), or our own page. */
function finalLocation(request: LogoutRequest): string | undefined {
  if (request.redirect === undefined) return undefined
  const url = new URL(request.redirect)
  if (request.raw.state !== undefined) url.searchParams.set('state', request.raw.state)
  return url.href
}

function signedOutPage(reply: FastifyReply): FastifyReply {
  return sendPage(reply, { status: 200, title: 'Signed out', body: html`<p>You are signed out. You can close this window.</p>` })
}

function confirmationPage(ctx: AuthServerContext, reply: FastifyReply, request: LogoutRequest): FastifyReply {
  const fields = Object.entries(request.raw).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">
`)
  return sendPage(reply, {
    status: 200, title: 'Sign out',
    body: html`<p>Sign out of ${ctx.settings.issuer}?</p>
<form method="post" action="${ctx.settings.prefix}/logout">
${csrfField(reply.generateCsrf())}
<input type="hidden" name="confirm" value="yes">
${fields}<div class="actions"><button type="submit" autofocus>Sign out</button></div>
</form>`,
  })
}

async function logOut(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply,
  logout: { request: LogoutRequest; session: BrowserSession | undefined }): Promise<FastifyReply> {
  const { session } = logout
  await endSession(ctx, request)
  reply.clearCookie(SESSION_COOKIE, cookieOptions(ctx))
  const final = finalLocation(logout.request)
  if (session) {
    request.log.info({ sub: session.user.sub }, 'logout')
    ctx.audit.emit('logout', {
      sub: session.user.sub, ...(logout.request.clientId !== undefined && { client_id: logout.request.clientId }),
      ...(session.user.provider !== undefined && { provider: session.user.provider }), ip: request.ip, req_id: request.id,
    })
    const provider = ctx.identityProviders.get(session.user.provider)
    if (provider?.settings.logoutUpstream && session.upstreamIdToken !== undefined && provider.connector.endSessionUrl) {
      const state = randomToken()
      const upstream = await provider.connector.endSessionUrl(session.upstreamIdToken, `${ctx.settings.issuer.replace(/\/+$/, '')}/logout/callback`, state)
        .catch((error: unknown) => {
          request.log.warn({ provider: provider.settings.id, err: error }, 'the identity provider\'s logout is unavailable; logged out here only')
          return undefined
        })
      if (upstream) {
        await ctx.store.upsert('logout', tokenHash(state), { ...(final !== undefined && { location: final }) }, LOGOUT_STATE_TTL_SECONDS)
        return sendRedirect(reply, request.method, upstream.href)
      }
    }
  }
  return final !== undefined ? sendRedirect(reply, request.method, final) : signedOutPage(reply)
}

async function logout(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = parametersOf(request)
  const checked = await validate(ctx, params)
  if (typeof checked === 'string') {
    request.log.info({ reason: checked }, 'logout request refused')
    return sendErrorPage(reply, 400, 'Invalid sign-out request', `${checked}. You are still signed in.`)
  }
  const session = await readSession(ctx, request)
  // §2: ask, unless there is nothing to end, the RP named the signed-in user, or this is the confirmation's answer.
  const confirmed = !session || (checked.hintSub !== undefined && checked.hintSub === session.user.sub)
    || (request.method === 'POST' && params.get('confirm') === 'yes')
  if (!confirmed) return confirmationPage(ctx, reply, checked)
  return logOut(ctx, request, reply, { request: checked, session })
}

/** Mounts `<issuer>/logout` (GET, POST) and `<issuer>/logout/callback`; returns their paths. */
export function registerLogout(app: FastifyInstance, ctx: AuthServerContext): string[] {
  const path = `${ctx.settings.prefix}/logout`
  const back = `${path}/callback`
  app.get(path, { errorHandler: pageErrorHandler }, (request, reply) => logout(ctx, request, reply))
  app.post(path, {
    errorHandler: pageErrorHandler,
    // The confirmation's answer carries our CSRF token; an RP's own form POST (§2) is shown the confirmation.
    preHandler: (request, reply, done) => {
      if (parseForm(request.body).get('confirm') === 'yes') return app.csrfProtection(request, reply, done)
      done()
      return undefined
    },
  }, (request, reply) => logout(ctx, request, reply))
  app.get(back, { errorHandler: pageErrorHandler }, async (request, reply) => {
    const state = (request.query as Record<string, unknown>).state
    if (typeof state !== 'string' || state.length > 100) return signedOutPage(reply)
    const id = tokenHash(state)
    const stored = await ctx.store.find('logout', id) as { location?: string } | undefined
    if (!stored || !(await ctx.store.consume('logout', id))) return signedOutPage(reply)
    return typeof stored.location === 'string' ? sendRedirect(reply, 'GET', stored.location) : signedOutPage(reply)
  })
  return [path, back]
}
