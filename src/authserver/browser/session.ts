/**
 * The browser login session of the embedded server: a cookie holding 256 random bits, and in the store,
 * under the cookie's SHA-256, who logged in and when (auth_time). A copy of the store logs no one in.
 * The cookie is HttpOnly, SameSite=Lax (a client's top-level redirect to /authorize must carry it; Strict
 * would log the user out on every cross-site arrival), and Secure when the issuer is https.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { tokenHash } from '../../authn/token-cache.js'
import type { AuthServerContext } from '../context.js'
import { randomToken } from '../random.js'
import type { User } from '../users.js'

import { SESSION_COOKIE } from '../../common/token-formats.js'
export { CSRF_COOKIE, GATEWAY_COOKIES, SESSION_COOKIE } from '../../common/token-formats.js'

export interface BrowserSession {
  /** The store id (SHA-256 of the cookie), also the throttling key of the browser (RFC 8628 §5.1). */
  readonly id: string
  readonly user: User
  /** Seconds since the epoch: auth_time. */
  readonly authTime: number
  /** Milliseconds since the epoch, for prompt=login (a login must follow the request, not share its second). */
  readonly loginAt: number
  /** A federated login: the provider's ID token, kept for its RP-initiated logout (`logout.upstream`). */
  readonly upstreamIdToken?: string
}

interface StoredSession { sub: string; authTime: number; loginAt: number; upstreamIdToken?: string }

/** What a login knows beyond the user: a federated one, when the provider last authenticated them and its ID token. */
export interface LoginFacts {
  /** The provider's auth_time (seconds); the session's auth_time is then the provider's, never later than now. */
  readonly authTime?: number | undefined
  readonly upstreamIdToken?: string | undefined
}

/** The cookie's attributes; `Path` is the issuer's path, so the session reaches no other application. */
export function cookieOptions(ctx: AuthServerContext) {
  return {
    path: ctx.settings.prefix === '' ? '/' : `${ctx.settings.prefix}/`,
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: ctx.settings.issuer.startsWith('https:'),
  }
}

/** The logged-in session of this browser, or undefined (no cookie, unknown, expired, or its user removed). */
export async function readSession(ctx: AuthServerContext, request: FastifyRequest): Promise<BrowserSession | undefined> {
  const cookie = request.cookies[SESSION_COOKIE]
  if (cookie === undefined || cookie.length > 100) return undefined
  const id = tokenHash(cookie)
  const stored = await ctx.store.find('session', id) as StoredSession | undefined
  const user = stored && await ctx.accounts.find(stored.sub)
  return stored && user ? {
    id, user, authTime: stored.authTime, loginAt: stored.loginAt,
    ...(typeof stored.upstreamIdToken === 'string' && { upstreamIdToken: stored.upstreamIdToken }),
  } : undefined
}

/**
 * A successful login: any previous session of this browser ends and a new id is issued, so an id planted
 * before the login (session fixation) is worth nothing after it.
 */
export async function startSession(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply,
  user: User, facts: LoginFacts = {}): Promise<BrowserSession> {
  await endSession(ctx, request)
  const cookie = randomToken()
  const loginAt = ctx.now()
  const now = Math.floor(loginAt / 1000)
  const authTime = facts.authTime !== undefined ? Math.min(facts.authTime, now) : now
  const upstream = facts.upstreamIdToken !== undefined ? { upstreamIdToken: facts.upstreamIdToken } : {}
  const stored: StoredSession = { sub: user.sub, authTime, loginAt, ...upstream }
  await ctx.store.upsert('session', tokenHash(cookie), { ...stored }, ctx.settings.sessionTtlSeconds)
  reply.setCookie(SESSION_COOKIE, cookie, { ...cookieOptions(ctx), maxAge: ctx.settings.sessionTtlSeconds })
  return { id: tokenHash(cookie), user, authTime, loginAt, ...upstream }
}

/** Ends this browser's session, if it has one: its record goes, so a copy of the cookie logs no one in. */
export async function endSession(ctx: AuthServerContext, request: FastifyRequest): Promise<void> {
  const previous = request.cookies[SESSION_COOKIE]
  if (previous !== undefined && previous.length <= 100) await ctx.store.destroy('session', tokenHash(previous))
}
