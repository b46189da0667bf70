/**
 * An interaction: a request that waits for the user, between the page that starts it and the page that
 * finishes it. Either a validated authorization request waiting for login and consent, or a visit to
 * /device waiting for login. Its id (256 random bits) travels in the page URLs; the store keeps it under
 * the id's SHA-256 for ten minutes, and the consent decision consumes it, so it is answered once.
 */
import { tokenHash } from '../../authn/token-cache.js'
import type { AuthServerContext } from '../context.js'
import { randomToken } from '../random.js'

/** How long a user has to log in and decide (node-oidc-provider's Interaction TTL is one hour; ten minutes here). */
export const INTERACTION_TTL_SECONDS = 600

/** An authorization request /authorize has validated (every field as checked; RFC 6749 §4.1.2: what the code is bound to). */
export interface AuthorizationRequest {
  readonly clientId: string
  readonly redirectUri: string
  readonly redirectUriWasSent: boolean
  readonly state?: string
  readonly scope: readonly string[]
  /** RFC 8707 §2.1: the resources named, each a configured one; absent when none was. */
  readonly resource?: readonly string[]
  readonly nonce?: string
  readonly codeChallenge?: string
  readonly codeChallengeMethod?: 'S256'
  /** RFC 9449 §10: the thumbprint of the DPoP key the code is to be redeemed with. */
  readonly dpopJkt?: string
  /** OIDC max_age, seconds. */
  readonly maxAge?: number
  readonly prompt: readonly string[]
}

export type Interaction =
  | { readonly kind: 'authorize'; readonly request: AuthorizationRequest; readonly notBefore?: number }
  | { readonly kind: 'device'; readonly userCode?: string }

/**
 * Stores a new interaction for a browser at `ip`; returns its id, for the page URLs. Throws TooManyAttempts
 * past INTERACTION_LIMITS for the address.
 */
export async function startInteraction(ctx: AuthServerContext, interaction: Interaction, ip: string): Promise<string> {
  // Every interaction started counts: kept, never given back.
  const attempt = await ctx.interactionThrottle.reserve([`ip:${ip}`])
  attempt.keep()
  const id = randomToken()
  await ctx.store.upsert('interaction', tokenHash(id), { ...interaction }, INTERACTION_TTL_SECONDS)
  return id
}

/** The unexpired, unanswered interaction with this id, or undefined. */
export async function findInteraction(ctx: AuthServerContext, id: string | undefined): Promise<Interaction | undefined> {
  if (id === undefined || id.length > 100) return undefined
  const found = await ctx.store.find('interaction', tokenHash(id)) as (Interaction & { consumedAt?: number }) | undefined
  return found && found.consumedAt === undefined ? found : undefined
}

/** Marks it answered, atomically: true for the first caller only (two tabs, a double submit). */
export function finishInteraction(ctx: AuthServerContext, id: string): Promise<boolean> {
  return ctx.store.consume('interaction', tokenHash(id))
}
