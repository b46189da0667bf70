/**
 * Remembered consent, per user and client: the scopes the user agreed to give the client with "remember
 * this decision" ticked. A request within them skips the consent page; one asking for more shows it again.
 */
import type { AuthServerContext } from '../context.js'

interface StoredConsent { scope: string[] }

/** sub and client_id are printable ASCII without spaces (the config schema), so a space separates them. */
const consentId = (sub: string, clientId: string) => `${sub} ${clientId}`

export async function hasConsent(ctx: AuthServerContext, sub: string, clientId: string, scope: readonly string[]): Promise<boolean> {
  const stored = await ctx.store.find('consent', consentId(sub, clientId)) as StoredConsent | undefined
  if (!stored) return false
  const given = new Set(stored.scope)
  return scope.every((item) => given.has(item))
}

/** Adds `scope` to what the user has agreed to give the client, for `consent.ttl` from now. */
export async function rememberConsent(ctx: AuthServerContext, sub: string, clientId: string, scope: readonly string[]): Promise<void> {
  const id = consentId(sub, clientId)
  const stored = await ctx.store.find('consent', id) as StoredConsent | undefined
  const merged: StoredConsent = { scope: [...new Set([...(stored?.scope ?? []), ...scope])] }
  await ctx.store.upsert('consent', id, { ...merged }, ctx.settings.consentTtlSeconds)
}
