/**
 * A sign-in sent to an identity provider, between its start and its callback. The upstream `state`, `nonce` and
 * PKCE verifier (RFC 7636) are random per sign-in; the store keeps them under the state's SHA-256 for ten minutes,
 * with the provider they were sent to and the SHA-256 of this browser's binding cookie. The callback consumes the
 * record atomically (a replayed callback finds it used), and accepts it only from the browser that started it
 * (a callback URL carried to another browser is refused: RFC 9700 §4.7.1, login CSRF) and only on that provider's
 * own callback path (mix-up: RFC 9700 §4.4.2.2).
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { tokenHash } from '../../authn/token-cache.js'
import { FEDERATION_COOKIE } from '../../common/token-formats.js'
import { cookieOptions } from '../browser/session.js'
import type { AuthServerContext } from '../context.js'
import { randomToken } from '../random.js'
import type { UpstreamRequest } from './connector.js'

/** As long as an interaction: the user has that long to sign in upstream. */
const UPSTREAM_LOGIN_TTL_SECONDS = 600
const MAX_COOKIE = 100

interface StoredUpstreamLogin {
  readonly provider: string
  readonly interactionId: string
  readonly browser: string
  readonly nonce: string
  readonly codeVerifier: string
  readonly forceLogin: boolean
  readonly maxAge?: number
  readonly startedAt: number
}

/** A started sign-in, as the callback finds it. */
export interface PendingUpstreamLogin {
  readonly provider: string
  readonly interactionId: string
  readonly request: UpstreamRequest
}

export type TakenUpstreamLogin =
  | { readonly ok: true; readonly login: PendingUpstreamLogin }
  | { readonly ok: false; readonly reason: 'unknown' | 'replayed' | 'other_browser' | 'other_provider' }

/** This browser's binding cookie, set now when it has none (HttpOnly, SameSite=Lax: it rides the provider's redirect back). */
function browserBinding(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply): string {
  const existing = request.cookies[FEDERATION_COOKIE]
  if (existing !== undefined && existing.length >= 32 && existing.length <= MAX_COOKIE) return existing
  const value = randomToken()
  reply.setCookie(FEDERATION_COOKIE, value, cookieOptions(ctx))
  return value
}

export function callbackUrl(ctx: AuthServerContext, provider: string): string {
  return `${ctx.settings.issuer.replace(/\/+$/, '')}/callback/${provider}`
}

/** Records a new sign-in at `provider` for the interaction; returns what its authorization request carries. */
export async function startUpstreamLogin(ctx: AuthServerContext, request: FastifyRequest, reply: FastifyReply,
  start: { provider: string; interactionId: string; forceLogin: boolean; maxAge?: number | undefined }): Promise<UpstreamRequest> {
  const browser = browserBinding(ctx, request, reply)
  const state = randomToken()
  const upstream: UpstreamRequest = {
    state,
    nonce: randomToken(),
    // RFC 7636 §4.1: 43-128 unreserved characters; 256 random bits in base64url are 43.
    codeVerifier: randomToken(),
    redirectUri: callbackUrl(ctx, start.provider),
    forceLogin: start.forceLogin,
    ...(start.maxAge !== undefined && { maxAge: start.maxAge }),
    startedAt: ctx.now(),
  }
  const stored: StoredUpstreamLogin = {
    provider: start.provider, interactionId: start.interactionId, browser: tokenHash(browser), nonce: upstream.nonce,
    codeVerifier: upstream.codeVerifier, forceLogin: upstream.forceLogin, startedAt: upstream.startedAt,
    ...(upstream.maxAge !== undefined && { maxAge: upstream.maxAge }),
  }
  await ctx.store.upsert('federated_login', tokenHash(state), { ...stored }, UPSTREAM_LOGIN_TTL_SECONDS)
  return upstream
}

/** The sign-in this callback answers, consumed: once, in the browser that started it, at its provider's callback. */
export async function takeUpstreamLogin(ctx: AuthServerContext, request: FastifyRequest, provider: string,
  state: string): Promise<TakenUpstreamLogin> {
  if (state.length > MAX_COOKIE) return { ok: false, reason: 'unknown' }
  const id = tokenHash(state)
  const stored = await ctx.store.find('federated_login', id) as (StoredUpstreamLogin & { consumedAt?: number }) | undefined
  if (!stored) return { ok: false, reason: 'unknown' }
  if (stored.consumedAt !== undefined || !(await ctx.store.consume('federated_login', id))) return { ok: false, reason: 'replayed' }
  const cookie = request.cookies[FEDERATION_COOKIE]
  if (cookie === undefined || cookie.length > MAX_COOKIE || tokenHash(cookie) !== stored.browser) return { ok: false, reason: 'other_browser' }
  if (stored.provider !== provider) return { ok: false, reason: 'other_provider' }
  return {
    ok: true,
    login: {
      provider,
      interactionId: stored.interactionId,
      request: {
        state, nonce: stored.nonce, codeVerifier: stored.codeVerifier, redirectUri: callbackUrl(ctx, provider),
        forceLogin: stored.forceLogin, startedAt: stored.startedAt, ...(stored.maxAge !== undefined && { maxAge: stored.maxAge }),
      },
    },
  }
}
