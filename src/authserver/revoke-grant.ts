/**
 * Revoking a whole grant (refresh token reuse, RFC 9700 §4.14.2; a revoked refresh token, RFC 7009 §2.1; a
 * replayed code, RFC 6749 §4.1.2): every
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
