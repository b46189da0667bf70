/**
 * grant_type=refresh_token (checklist §3.3): rotation on every use (RT-03), reuse of a rotated token
 * revokes the whole grant (RT-04), parallel refreshes → one success (RT-05, an atomic consume), scope
 * may narrow but never widen and the new refresh token keeps the grant's scope (RT-06), and the
 * grant's absolute lifetime is never extended (RT-08). With openid still in scope, a new ID token (RT-07).
 */
import { tokenHash } from '../../authn/token-cache.js'
import { InvalidGrant, InvalidRequest } from '../../errors/oauth-errors.js'
import { withIdToken } from '../id-token.js'
import { revokeGrant } from '../revoke-grant.js'
import { grantScope } from '../scope.js'
import type { GrantRecord, StoredRefreshToken } from '../tokens.js'
import type { GrantHandler } from './grant.js'

/** How long after a rotation a second presentation counts as a lost race rather than a replay. */
const RACE_WINDOW_MS = 2000

export const refreshTokenGrant: GrantHandler = {
  grantType: 'refresh_token',
  parameters: ['refresh_token', 'scope'],
  async handle({ form, client, ip, audience, ctx }) {
    const presented = form.get('refresh_token')
    if (presented === undefined) throw new InvalidRequest('refresh_token is required')
    const id = tokenHash(presented)
    const stored = await ctx.store.find('refresh_token', id) as (StoredRefreshToken & { consumedAt?: number }) | undefined
    if (!stored) throw new InvalidGrant('unknown, expired or revoked refresh token')
    // RT-02: another client's refresh token says nothing about itself to this client.
    if (stored.clientId !== client.clientId) throw new InvalidGrant('refresh token of another client')
    // RT-06, checked before anything is consumed: a refused scope leaves the refresh token usable.
    const scope = grantScope(form.get('scope'), stored.scope)
    // RT-04: presenting a token already rotated out is reuse, and the whole family dies. Except within
    // RACE_WINDOW_MS of its rotation: that is a parallel refresh by the same client which lost the race
    // (RT-05), refused without a token and without killing the winner's new ones (never a second family).
    if (stored.consumedAt !== undefined && ctx.now() - stored.consumedAt < RACE_WINDOW_MS) {
      throw new InvalidGrant('refresh token already rotated by a parallel request')
    }
    if (stored.consumedAt !== undefined) {
      await revokeGrant(ctx, stored.grantId, 'refresh token reuse')
      ctx.audit.emit('refresh_token.reuse_detected', {
        client_id: client.clientId, sub: stored.sub, grant_id: stored.grantId, grant_revoked: true, ip,
      })
      throw new InvalidGrant('refresh token reuse: the grant is revoked')
    }
    // RT-05: of parallel refreshes, the atomic consume lets exactly one through; the others lose the race
    // (not a replay of a rotated token, so the winner's new tokens stay valid).
    if (!(await ctx.store.consume('refresh_token', id))) throw new InvalidGrant('refresh token already being rotated')
    const grantRow = await ctx.store.find('grant', stored.grantId)
    const nowSeconds = Math.floor(ctx.now() / 1000)
    if (!grantRow || stored.grantExpiresAt <= nowSeconds) throw new InvalidGrant('the grant has ended')
    // RT-09: a user or client removed from the config can no longer refresh.
    if (stored.sub !== client.clientId && !ctx.users.findBySub(stored.sub)) throw new InvalidGrant('the user no longer exists')
    const grant = grantRow as unknown as GrantRecord
    // The new refresh token carries the grant's whole scope; only this access token is narrowed.
    // Written together: one commit of the store (group commit) rather than two in a row.
    const [{ token, expiresIn }, refreshToken] = await Promise.all([ctx.tokens.issueAccessToken(grant, scope, audience), ctx.tokens.issueRefreshToken(grant)])
    // A parallel reuse may have revoked the grant while these were written: then they die with it.
    if (!(await ctx.store.find('grant', grant.grantId))) {
      await revokeGrant(ctx, grant.grantId, 'revoked during rotation')
      throw new InvalidGrant('the grant was revoked')
    }
    // RT-07: an ID token when the narrowed scope still holds openid; the grant keeps sub and auth_time, and
    // there is no nonce (that belonged to the authorization request, OIDC Core §12.2).
    return withIdToken(ctx, { client, grant, scope },
      { access_token: token, token_type: 'Bearer', expires_in: expiresIn, scope: scope.join(' '), refresh_token: refreshToken })
  },
}
