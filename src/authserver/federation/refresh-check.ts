/**
 * `identity_providers[].refresh_check`: before a federated user's refresh token is rotated, the provider is asked
 * whether the account still exists — an OpenID Connect provider by refreshing the upstream refresh token kept at
 * sign-in (`invalid_grant`: gone, or its consent withdrawn), GitHub by reading `/user` with the kept access token.
 * Gone: the account is forgotten (its sessions and grants end) and the refresh is `invalid_grant`. The provider
 * unreachable: 503 `temporarily_unavailable`, the refresh token untouched, so the client tries again later.
 *
 * One check per account at a time in this process, and a confirmed account is not asked again for a short
 * while: providers that rotate refresh tokens with reuse detection (oidc-provider, Keycloak, Okta) would
 * otherwise see two parallel refreshes of one user as a stolen token.
 */
import { LRUCache } from 'lru-cache'
import { InvalidGrant, TemporarilyUnavailable } from '../../errors/oauth-errors.js'
import type { AuthServerContext } from '../context.js'
import type { User } from '../users.js'
import { UpstreamLoginError } from './connector.js'

/** How long a confirmed account is taken as confirmed. */
const CONFIRMED_FOR_MS = 30_000

const inFlight = new WeakMap<AuthServerContext, Map<string, Promise<void>>>()
/** Accounts confirmed lately, per server: bounded, each forgotten after CONFIRMED_FOR_MS. */
const confirmed = new WeakMap<AuthServerContext, LRUCache<string, true>>()

function confirmedOf(ctx: AuthServerContext): LRUCache<string, true> {
  let cache = confirmed.get(ctx)
  if (!cache) confirmed.set(ctx, cache = new LRUCache<string, true>({ max: 10_000, ttl: CONFIRMED_FOR_MS, perf: { now: ctx.now } }))
  return cache
}

function inFlightOf(ctx: AuthServerContext): Map<string, Promise<void>> {
  let map = inFlight.get(ctx)
  if (!map) inFlight.set(ctx, map = new Map())
  return map
}

async function ask(ctx: AuthServerContext, user: User & { provider: string }): Promise<void> {
  const provider = ctx.identityProviders.get(user.provider)!
  const credential = await ctx.accounts.credential(user.sub)
  if (credential === undefined) throw new InvalidGrant('no upstream credential is kept for this account (refresh_check)')
  let result: { exists: boolean; credential?: string }
  try {
    result = await provider.connector.checkAccount!(credential)
  } catch (error) {
    const failure = error instanceof UpstreamLoginError ? error : new UpstreamLoginError(String(error), true)
    if (failure.unavailable) throw new TemporarilyUnavailable(`the identity provider ${user.provider} could not be asked about the account: ${failure.message}`)
    throw new InvalidGrant(`the identity provider ${user.provider} refused the account check`)
  }
  if (!result.exists) {
    await ctx.accounts.forget(user.sub)
    ctx.audit.emit('account.gone', { sub: user.sub, provider: user.provider })
    throw new InvalidGrant('the account no longer exists at its identity provider')
  }
  if (result.credential !== undefined && result.credential !== credential) await ctx.accounts.save(user, result.credential)
  confirmedOf(ctx).set(user.sub, true)
}

/** Resolves when the user may refresh; throws InvalidGrant or TemporarilyUnavailable otherwise. */
export async function checkAccountAtRefresh(ctx: AuthServerContext, user: User): Promise<void> {
  const provider = ctx.identityProviders.get(user.provider)
  if (user.provider === undefined || !provider?.settings.refreshCheck || !provider.connector.checkAccount) return
  if (confirmedOf(ctx).has(user.sub)) return
  const running = inFlightOf(ctx)
  const pending = running.get(user.sub)
  if (pending) return pending
  const check = ask(ctx, { ...user, provider: user.provider }).finally(() => running.delete(user.sub))
  running.set(user.sub, check)
  return check
}
