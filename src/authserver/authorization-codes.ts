/**
 * Authorization codes (RFC 6749 §4.1.2, §10.10): 256 random bits handed to /authorize, kept in the
 * store only as their SHA-256 with everything the code is bound to, for 60 seconds by default
 * (`authorization_code.ttl`: node-oidc-provider's and Keycloak's default; RFC 6749 §4.1.2 recommends
 * 10 minutes at most). Redemption is
 * grants/authorization-code.ts; this file owns how a code and its replay bookkeeping are stored.
 */
import { tokenHash } from '../authn/token-cache.js'
import { InvalidRequest, InvalidScope, UnauthorizedClient } from '../errors/oauth-errors.js'
import type { RegisteredClient } from './registered-client.js'
import type { AuthServerContext } from './context.js'
import { challengeIsWellFormed } from './pkce.js'
import { requestedResources } from './resource.js'
import { randomToken } from './random.js'

/** What a code is bound to (RFC 6749 §4.1.2): stored under the code's hash, never beside the code itself. */
export interface AuthorizationCodeRecord {
  readonly clientId: string
  /** The redirect_uri the authorization response went to: as sent, or the client's only registered one. */
  readonly redirectUri: string
  /** Whether the authorization request carried redirect_uri; the token request must then repeat it (RFC 6749 §4.1.3). */
  readonly redirectUriWasSent: boolean
  readonly scope: readonly string[]
  /**
   * RFC 8707 §2.1: the resources the authorization request named, which the grant is for; absent when it
   * named none (the configured `access_token.audience`). The token request may narrow them (§2.2).
   */
  readonly resource?: readonly string[]
  readonly sub: string
  /** Seconds since the epoch: when the user authenticated. */
  readonly authTime: number
  /** For the ID token (OIDC Core §3.1.3.7), exactly as the request sent it. */
  readonly nonce?: string
  readonly codeChallenge?: string
  readonly codeChallengeMethod?: 'S256'
  /** RFC 9449 §10: `dpop_jkt` of the authorization request; the code is redeemed with a proof of that key only. */
  readonly dpopJkt?: string
  /** Seconds since the epoch. */
  readonly issuedAt: number
  readonly expiresAt: number
}

/** What /authorize hands over: the record's bindings, with the client itself instead of its id. */
export type IssueAuthorizationCode = Omit<AuthorizationCodeRecord, 'clientId' | 'issuedAt' | 'expiresAt'> & {
  readonly client: RegisteredClient
}

/**
 * Mints a code for a request /authorize has already validated and the user has approved, and returns it.
 * As a last line of defence it refuses what /authorize should already have refused (a client not
 * registered for the code flow, a scope outside its own, PKCE missing or not S256):
 * the errors are the ones /authorize redirects with.
 */
export async function issueAuthorizationCode(ctx: AuthServerContext, request: IssueAuthorizationCode): Promise<string> {
  const { client, codeChallenge, codeChallengeMethod } = request
  if (!client.grantTypes.has('authorization_code')) throw new UnauthorizedClient(`client ${client.clientId} may not use authorization_code`)
  const allowed = client.consentScopes ?? client.scopes
  const refused = request.scope.filter((scope) => !allowed.has(scope))
  if (refused.length > 0) throw new InvalidScope(`not permitted: ${refused.join(' ')}`)
  if (codeChallenge === undefined) {
    if (client.requirePkce) throw new InvalidRequest('code_challenge is required')
  } else {
    // RFC 7636 §4.3: a challenge without a method means plain, which is refused like any other method.
    if (codeChallengeMethod !== 'S256') throw new InvalidRequest('code_challenge_method must be S256')
    if (!challengeIsWellFormed(codeChallenge)) throw new InvalidRequest('malformed code_challenge')
  }
  // A resource the configuration dropped while the user was logging in (a restart) is refused as at /authorize.
  const resource = requestedResources(request.resource ?? [], ctx.settings.resourceIndicators)
  const issuedAt = Math.floor(ctx.now() / 1000)
  const record: AuthorizationCodeRecord = {
    clientId: client.clientId,
    redirectUri: request.redirectUri,
    redirectUriWasSent: request.redirectUriWasSent,
    scope: [...request.scope],
    ...(resource !== undefined && { resource }),
    sub: request.sub,
    authTime: request.authTime,
    ...(request.nonce !== undefined && { nonce: request.nonce }),
    ...(codeChallenge !== undefined && { codeChallenge, codeChallengeMethod: 'S256' as const }),
    ...(request.dpopJkt !== undefined && { dpopJkt: request.dpopJkt }),
    issuedAt,
    expiresAt: issuedAt + ctx.settings.authorizationCodeTtlSeconds,
  }
  const code = randomToken()
  await ctx.store.upsert('authorization_code', codeId(code), { ...record }, ctx.settings.authorizationCodeTtlSeconds)
  return code
}

/** The store id of a code: its SHA-256, so a copy of the store redeems nothing, and lookups leak nothing through timing. */
export function codeId(code: string): string {
  return tokenHash(code)
}

/** The unexpired code, consumed or not (`consumedAt`), or undefined. */
export async function findAuthorizationCode(ctx: AuthServerContext, id: string)
  : Promise<(AuthorizationCodeRecord & { readonly consumedAt?: number }) | undefined> {
  return await ctx.store.find('authorization_code', id) as (AuthorizationCodeRecord & { consumedAt?: number }) | undefined
}

// Replay bookkeeping (RFC 6749 §4.1.2: a code used twice revokes its grant). Upserting the code record again would clear its consumed mark, so what
// redemption learns is kept beside it, under ids no SHA-256 in base64url can take ('.' is not in its
// alphabet), for as long as the code itself could still be presented.
const grantLinkId = (id: string) => `${id}.grant`
const replayMarkId = (id: string) => `${id}.replayed`
const remaining = (ctx: AuthServerContext, code: AuthorizationCodeRecord) =>
  Math.max(1, code.expiresAt - Math.floor(ctx.now() / 1000))

/** Records the grant the first redemption started; stored with its grantId, so revoking the grant removes it. */
export async function linkGrant(ctx: AuthServerContext, id: string, code: AuthorizationCodeRecord, grantId: string): Promise<void> {
  await ctx.store.upsert('authorization_code', grantLinkId(id), { grantId }, remaining(ctx, code))
}

/** The grant started from the code, once its first redemption has recorded it. */
export async function linkedGrant(ctx: AuthServerContext, id: string): Promise<string | undefined> {
  const link = await ctx.store.find('authorization_code', grantLinkId(id))
  return link?.grantId
}

/** Notes that an otherwise valid second redemption happened, for a first one still being answered. */
export async function markReplayed(ctx: AuthServerContext, id: string, code: AuthorizationCodeRecord): Promise<void> {
  await ctx.store.upsert('authorization_code', replayMarkId(id), {}, remaining(ctx, code))
}

export async function wasReplayed(ctx: AuthServerContext, id: string): Promise<boolean> {
  return (await ctx.store.find('authorization_code', replayMarkId(id))) !== undefined
}
