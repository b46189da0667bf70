/**
 * Revoking a whole grant (refresh reuse RT-04, refresh revocation RV-03, code replay AC-06): every
 * artifact of it leaves the store, its JWT access tokens are deny-listed until they expire, and the
 * gateway's caches drop all of them at once.
 */
import type { AuthServerContext } from './context.js'

export async function revokeGrant(ctx: AuthServerContext, grantId: string, reason: string): Promise<void> {
  const removed = await ctx.store.revokeByGrantId(grantId)
  for (const { kind, id, value } of removed) {
    if (kind !== 'access_token') continue
    if (value.format === 'jwt' && typeof value.jti === 'string' && typeof value.exp === 'number') {
      await ctx.revocations.revokeJti(value.jti, value.exp)
    } else {
      ctx.revocations.revokeHash(id)
    }
  }
  ctx.log.info({ grantId, reason, artifacts: removed.length }, 'grant revoked')
}
