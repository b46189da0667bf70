/**
 * grant_type=refresh_token (RFC 6749 §6): rotation on every use (RFC 9700 §4.14.2), scope may narrow but
 * never widen and the new refresh token keeps the grant's scope (RFC 6749 §6), and so do RFC 8707 resources
 * (§2.2), the grant's absolute lifetime is never extended, and with openid still in scope a new ID token
 * (OIDC Core §12.2).
 *
 * Reuse (RFC 9700 §4.14.2): a rotation is one atomic step of the store, the old token consumed
 * and the new tokens written together, so of parallel refreshes exactly one rotates and answers 200. Any
 * other presentation of a rotated-out token is reuse and revokes the whole grant, the tokens just issued
 * included: the server cannot tell a thief who refreshed first from the client, and a lost race looks the
 * same. Except within the reuse grace (`refresh_token.reuse_grace`, or the client's own; 0 by default, at
 * most 10 s): there the same client asking for the same scope and audience, while the new refresh token is
 * still unused, gets that rotation's response again: the same tokens, never a second family. The response
 * is kept for the grace only, sealed under the old refresh token (refresh-successor.ts).
 *
 * DPoP (RFC 9449 §5): a family a public client started with a proof is bound to that key; a refresh without
 * a proof of it is refused before anything else is looked at, so it neither rotates nor revokes (whoever
 * holds the token without the key can do nothing with it). The new access token is bound to the key of the
 * refresh's own proof, if any, whatever the client.
 */
import { tokenHash } from '../../authn/token-cache.js'
import type { VerifiedProof } from '../../dpop/proof.js'
import { InvalidGrant, InvalidRequest } from '../../errors/oauth-errors.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import { withIdToken } from '../id-token.js'
import { openSuccessor, requestBinding, sealSuccessor } from '../refresh-successor.js'
import { audienceWithin } from '../resource.js'
import { revokeGrant } from '../revoke-grant.js'
import { grantScope } from '../scope.js'
import type { ArtifactWrite } from '../storage/adapter.js'
import type { StoredRefreshToken, TokenGrant, TokenResponseBody } from '../tokens.js'
import type { GrantHandler } from './grant.js'
import { checkAccountAtRefresh } from '../federation/refresh-check.js'

type FoundRefreshToken = StoredRefreshToken & { readonly consumedAt?: number }

/** §5: a bound family is refreshed with a proof of its key only; the refusal changes nothing stored. */
function checkBinding(stored: FoundRefreshToken, dpop: VerifiedProof | undefined): void {
  if (stored.jkt === undefined) return
  if (dpop === undefined) throw new InvalidGrant('refresh token bound to a DPoP key, presented without a proof', 'the refresh token is bound to a DPoP key: send a proof of it')
  if (dpop.jkt !== stored.jkt) throw new InvalidGrant('refresh token bound to another DPoP key', 'the refresh token is bound to another DPoP key')
}

/** One presentation of a refresh token: who, which token (raw, for the seal; hashed, its id), what for. */
interface Presentation {
  readonly ctx: AuthServerContext
  readonly client: RegisteredClient
  readonly presented: string
  readonly id: string
  /** The scope and audience asked for (refresh-successor.ts): a replay in the grace must ask the same. */
  readonly binding: Buffer
  readonly ip: string
}

function reuseGraceMs(ctx: AuthServerContext, client: RegisteredClient): number {
  return client.refreshReuseGraceMs ?? ctx.settings.refreshReuseGraceMs
}

/**
 * A rotated-out refresh token came back. Within the grace, the same request while the new refresh token is
 * unused gets the rotation's response again; anything else is reuse, and the grant dies (RFC 9700 §4.14.2).
 */
async function presentedAgain(request: Presentation, stored: FoundRefreshToken, consumedAt: number): Promise<TokenResponseBody> {
  const { ctx, client, id, ip } = request
  const elapsedMs = Math.max(0, ctx.now() - consumedAt)
  const graceMs = reuseGraceMs(ctx, client)
  if (graceMs > 0 && elapsedMs <= graceMs) {
    const kept = await ctx.store.find('refresh_successor', id)
    const body = typeof kept?.sealed === 'string' ? openSuccessor(request.presented, request.binding, kept.sealed) : undefined
    const successor = body?.refresh_token !== undefined ? await ctx.store.find('refresh_token', tokenHash(body.refresh_token)) : undefined
    if (body && successor && successor.consumedAt === undefined) {
      ctx.audit.emit('refresh_token.replayed_in_grace', { client_id: client.clientId, sub: stored.sub, grant_id: stored.grantId, ip })
      return { ...body, expires_in: Math.max(1, body.expires_in - Math.floor(elapsedMs / 1000)) }
    }
  }
  await revokeGrant(ctx, stored.grantId, 'refresh token reuse')
  ctx.audit.emit('refresh_token.reuse_detected', {
    client_id: client.clientId, sub: stored.sub, grant_id: stored.grantId, grant_revoked: true, ip,
  })
  throw new InvalidGrant('refresh token reuse: the grant is revoked')
}

export const refreshTokenGrant: GrantHandler = {
  grantType: 'refresh_token',
  parameters: ['refresh_token', 'scope'],
  async handle({ form, client, ip, audience: resource, dpop, ctx }) {
    const presented = form.get('refresh_token')
    if (presented === undefined) throw new InvalidRequest('refresh_token is required')
    const id = tokenHash(presented)
    const stored = await ctx.store.find('refresh_token', id) as FoundRefreshToken | undefined
    if (!stored) throw new InvalidGrant('unknown, expired or revoked refresh token')
    // RFC 6749 §6: another client's refresh token says nothing about itself to this client.
    if (stored.clientId !== client.clientId) throw new InvalidGrant('refresh token of another client')
    checkBinding(stored, dpop)
    // The scope (RFC 6749 §6), checked before anything is consumed: a refused scope leaves the refresh token usable. So does a
    // resource outside the grant's (RFC 8707 §2.2: invalid_target); without one, the grant's resources.
    const scope = grantScope(form.get('scope'), stored.scope)
    const audience = audienceWithin(ctx.settings, stored.resource, resource)
    const request: Presentation = { ctx, client, presented, id, binding: requestBinding(scope, audience, dpop?.jkt), ip }
    if (stored.consumedAt !== undefined) return presentedAgain(request, stored, stored.consumedAt)
    if (stored.grantExpiresAt <= Math.floor(ctx.now() / 1000)) throw new InvalidGrant('the grant has ended')
    // A user or client removed from the config can no longer refresh.
    if (stored.sub !== client.clientId) {
      const user = await ctx.accounts.find(stored.sub)
      if (!user) throw new InvalidGrant('the user no longer exists')
      // `identity_providers[].refresh_check`: the account must still exist at its provider.
      await checkAccountAtRefresh(ctx, user)
    }

    // Everything the rotation hands out is made first, then stored in the step that consumes the old token.
    // The new refresh token carries the grant's whole scope and resources; only this access token is narrowed.
    const grant: TokenGrant = {
      grantId: stored.grantId, clientId: stored.clientId, sub: stored.sub, scope: stored.scope, expiresAt: stored.grantExpiresAt,
      ...(stored.authTime !== undefined && { authTime: stored.authTime }),
      ...(stored.resource !== undefined && { resource: stored.resource }),
      ...(stored.jkt !== undefined && { jkt: stored.jkt }),
      ...(stored.claims !== undefined && { claims: stored.claims }),
    }
    const access = ctx.tokens.mintAccessToken(grant, scope, audience, dpop?.jkt, client.boundCertificate)
    const refresh = ctx.tokens.mintRefreshToken(grant)
    // An ID token when the narrowed scope still holds openid; the grant keeps sub and auth_time, and
    // there is no nonce (that belonged to the authorization request, OIDC Core §12.2).
    const body = await withIdToken(ctx, { client, grant, scope },
      { access_token: access.token, token_type: access.tokenType, expires_in: access.expiresIn, scope: scope.join(' '), refresh_token: refresh.token })
    const writes: ArtifactWrite[] = [access.write, refresh.write]
    const graceMs = reuseGraceMs(ctx, client)
    if (graceMs > 0) {
      writes.push({ kind: 'refresh_successor', id, value: { grantId: grant.grantId, sealed: sealSuccessor(presented, request.binding, body) },
        expiresInSeconds: graceMs / 1000 })
    }
    // The grant must still be there: revoked, it would take these tokens with it only if they were written first.
    if (await ctx.store.consumeAndWrite('refresh_token', id, writes, { kind: 'grant', id: grant.grantId })) {
      ctx.tokens.noteIssued(access)
      return body
    }
    // Someone else consumed it first (a parallel refresh, or a thief), or the grant is gone.
    const after = await ctx.store.find('refresh_token', id) as FoundRefreshToken | undefined
    if (after?.consumedAt !== undefined) return presentedAgain(request, after, after.consumedAt)
    throw new InvalidGrant(after ? 'the grant has ended' : 'unknown, expired or revoked refresh token')
  },
}
