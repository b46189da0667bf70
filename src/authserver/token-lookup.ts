/**
 * What one of our tokens is, found server-side: shared by /revoke, /introspect and the gateway's
 * in-process trust. Refresh and opaque access tokens are found by hash; JWT access tokens are verified
 * with our keys and must still have their record (a revoked grant deletes it) and not be deny-listed.
 */
import { decodeJwt, jwtVerify } from 'jose'
import { tokenHash } from '../authn/token-cache.js'
import type { AuthServerContext } from './context.js'
import { OPAQUE_ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX, type StoredAccessToken, type StoredRefreshToken } from './tokens.js'

export type FoundToken =
  | { readonly type: 'refresh_token'; readonly id: string; readonly record: StoredRefreshToken; readonly exp: number }
  | { readonly type: 'access_token'; readonly id: string; readonly record: StoredAccessToken }

const JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/

export async function findRefreshToken(ctx: AuthServerContext, token: string): Promise<FoundToken | undefined> {
  if (!token.startsWith(REFRESH_TOKEN_PREFIX)) return undefined
  const id = tokenHash(token)
  const record = await ctx.store.find('refresh_token', id) as (StoredRefreshToken & { consumedAt?: number }) | undefined
  if (!record || record.consumedAt !== undefined) return undefined
  return { type: 'refresh_token', id, record, exp: record.grantExpiresAt }
}

export async function findAccessToken(ctx: AuthServerContext, token: string): Promise<FoundToken | undefined> {
  if (token.startsWith(OPAQUE_ACCESS_TOKEN_PREFIX)) {
    const id = tokenHash(token)
    const record = await ctx.store.find('access_token', id) as StoredAccessToken | undefined
    return record ? { type: 'access_token', id, record } : undefined
  }
  if (!JWS.test(token)) return undefined
  try {
    if (decodeJwt(token).iss !== ctx.settings.issuer) return undefined
    const { payload } = await jwtVerify(token, ctx.keys.getKey, {
      issuer: ctx.settings.issuer, typ: 'at+jwt', algorithms: [ctx.settings.algorithm], currentDate: new Date(ctx.now()),
    })
    if (typeof payload.jti !== 'string' || ctx.revocations.isRevoked(payload.jti)) return undefined
    const record = await ctx.store.find('access_token', payload.jti) as StoredAccessToken | undefined
    return record ? { type: 'access_token', id: payload.jti, record } : undefined
  } catch {
    return undefined
  }
}

/** By the hint first (RFC 7009 §2.1, RFC 7662 §2.1: the hint only orders the search). */
export async function findToken(ctx: AuthServerContext, token: string, hint: string | undefined): Promise<FoundToken | undefined> {
  const order = hint === 'refresh_token' ? [findRefreshToken, findAccessToken] : [findAccessToken, findRefreshToken]
  for (const find of order) {
    const found = await find(ctx, token)
    if (found) return found
  }
  return undefined
}
