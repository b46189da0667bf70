/**
 * Remembered consent, per user and client: the scopes the user agreed to give the client with "remember
 * this decision" ticked, and the RFC 8707 resources the tokens were for (the consent page names them). A
 * request within them skips the consent page; one asking for more of either shows it again.
 */
import type { AuthServerContext } from '../context.js'

/** `resource` lists the resources requests named; one naming none is for the configured audience, always covered. */
interface StoredConsent { scope: string[]; resource?: string[] }

/** sub and client_id are printable ASCII without spaces (the config schema), so a space separates them. */
const consentId = (sub: string, clientId: string) => `${sub} ${clientId}`

export async function hasConsent(ctx: AuthServerContext, sub: string, clientId: string, scope: readonly string[],
  resource?: readonly string[]): Promise<boolean> {
  const stored = await ctx.store.find('consent', consentId(sub, clientId)) as StoredConsent | undefined
  if (!stored) return false
  const given = new Set(stored.scope)
  const places = new Set(stored.resource ?? [])
  return scope.every((item) => given.has(item)) && (resource ?? []).every((item) => places.has(item))
}

/** Adds `scope` and `resource` to what the user has agreed to give the client, for `consent.ttl` from now. */
export async function rememberConsent(ctx: AuthServerContext, sub: string, clientId: string, scope: readonly string[],
  resource?: readonly string[]): Promise<void> {
  const id = consentId(sub, clientId)
  const stored = await ctx.store.find('consent', id) as StoredConsent | undefined
  const places = [...new Set([...(stored?.resource ?? []), ...(resource ?? [])])]
  const merged: StoredConsent = {
    scope: [...new Set([...(stored?.scope ?? []), ...scope])],
    ...(places.length > 0 && { resource: places }),
  }
  await ctx.store.upsert('consent', id, { ...merged }, ctx.settings.consentTtlSeconds)
}
