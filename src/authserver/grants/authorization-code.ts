/**
 * grant_type=authorization_code (RFC 6749 §4.1.3, RFC 7636 §4.6). The steps run in the order OAuth 2.1 §7.5.2
 * implies (only a replay that is otherwise valid revokes anything): the token endpoint has authenticated the client; then the code is looked up and its bindings checked (client,
 * PKCE, redirect_uri, RFC 9449 dpop_jkt, user, RFC 8707 resources), and only then is it consumed. So a replay that would fail
 * anyway (a wrong verifier, another client) revokes nothing, while an otherwise valid second redemption
 * revokes the grant the first one started (RFC 6749 §4.1.2, §10.5), however close together the two arrive.
 */
import type { VerifiedProof } from '../../dpop/proof.js'
import { InvalidGrant, InvalidRequest } from '../../errors/oauth-errors.js'
import {
  codeId, findAuthorizationCode, linkGrant, linkedGrant, markReplayed, wasReplayed, type AuthorizationCodeRecord,
} from '../authorization-codes.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import { InvalidDpopProof } from '../dpop.js'
import { withIdToken } from '../id-token.js'
import { verifierIsWellFormed, verifyPkce } from '../pkce.js'
import { audienceWithin } from '../resource.js'
import { revokeGrant } from '../revoke-grant.js'
import type { GrantHandler } from './grant.js'

/** RFC 7636 §4.6: the verifier must match the challenge the code was issued with, and only then. */
function checkPkce(code: AuthorizationCodeRecord, verifier: string | undefined, client: RegisteredClient): void {
  // RFC 7636 §4.1 syntax: a malformed verifier is a malformed request, whatever the code holds (as node-oidc-provider).
  if (verifier !== undefined && !verifierIsWellFormed(verifier)) throw new InvalidRequest('malformed code_verifier')
  if (code.codeChallenge === undefined) {
    // RFC 9700 §4.8.2: a verifier for a code issued without a challenge is a downgrade attempt.
    if (verifier !== undefined) throw new InvalidRequest('code_verifier sent for a code issued without code_challenge')
    // OAuth 2.1 §4.1.1: /authorize issues no such code to a client that requires PKCE; a code stored before the
    // client's registration changed is not honoured either.
    if (client.requirePkce) throw new InvalidGrant('code issued without PKCE to a client that requires it')
    return
  }
  // RFC 7636 §4.6.
  if (verifier === undefined) throw new InvalidGrant('code_verifier missing for a code issued with code_challenge')
  // Compared in constant time.
  if (!verifyPkce(verifier, code.codeChallenge)) throw new InvalidGrant('code_verifier does not match code_challenge')
}

/** RFC 6749 §4.1.3: redirect_uri repeated when it was sent, and never different from the one used. */
function checkRedirectUri(code: AuthorizationCodeRecord, redirectUri: string | undefined): void {
  if (redirectUri === undefined) {
    if (code.redirectUriWasSent) throw new InvalidRequest('redirect_uri is required: the authorization request carried it')
    return
  }
  // Simple string comparison, as at /authorize (RFC 9700 §4.1.3): no normalisation of any kind.
  if (redirectUri !== code.redirectUri) throw new InvalidGrant('redirect_uri differs from the authorization request\'s')
}

/** RFC 9449 §10: a code issued with dpop_jkt is redeemed with a proof of that key, and no other. */
function checkDpopJkt(code: AuthorizationCodeRecord, dpop: VerifiedProof | undefined): void {
  if (code.dpopJkt === undefined) return
  if (dpop === undefined) throw new InvalidDpopProof('dpop_missing', 'a DPoP proof is required: the authorization request named dpop_jkt')
  if (dpop.jkt !== code.dpopJkt) throw new InvalidDpopProof('dpop_key_mismatch', 'the DPoP proof\'s key is not the one dpop_jkt named')
}

/**
 * RFC 6749 §4.1.2, RFC 9700 §4.2.4: an otherwise valid redemption of a consumed code. The grant the first redemption started dies;
 * if that one has not recorded its grant yet, the mark left here makes it revoke the grant itself.
 */
async function refuseReplay(ctx: AuthServerContext, id: string, code: AuthorizationCodeRecord, ip: string): Promise<never> {
  await markReplayed(ctx, id, code)
  const grantId = await linkedGrant(ctx, id)
  // A replay means the code leaked (RFC 9700 §4.2.4): worth a warning whoever redeemed first.
  ctx.log.warn({ clientId: code.clientId, grantId }, 'authorization code replayed')
  if (grantId !== undefined) await revokeGrant(ctx, grantId, 'authorization code replayed')
  // Without a grant yet, the first redemption revokes its own when it finds the mark: revoked all the same.
  ctx.audit.emit('authorization_code.replay_detected', {
    client_id: code.clientId, sub: code.sub, ...(grantId !== undefined && { grant_id: grantId }), grant_revoked: true, ip,
  })
  throw new InvalidGrant('authorization code already used; its grant is revoked')
}

export const authorizationCodeGrant: GrantHandler = {
  grantType: 'authorization_code',
  parameters: ['code', 'redirect_uri', 'code_verifier'],
  async handle({ form, client, ip, audience: resource, dpop, ctx }) {
    const presented = form.get('code')
    if (presented === undefined) throw new InvalidRequest('code is required')
    const id = codeId(presented)
    const code = await findAuthorizationCode(ctx, id)
    if (!code) throw new InvalidGrant('unknown or expired authorization code')
    // RFC 6749 §4.1.3, §10.5: a code stolen by another client is worthless to it, and tells it nothing.
    if (code.clientId !== client.clientId) throw new InvalidGrant('authorization code of another client')
    checkPkce(code, form.get('code_verifier'), client)
    checkRedirectUri(code, form.get('redirect_uri'))
    checkDpopJkt(code, dpop)
    const user = await ctx.accounts.find(code.sub)
    if (!user) throw new InvalidGrant('the user no longer exists')
    // RFC 8707 §2.2: resources within those the code was issued for (invalid_target otherwise, and the code
    // stays unused, as for the checks above); without any, all of them.
    const audience = audienceWithin(ctx.settings, code.resource, resource)
    // Of concurrent redemptions the atomic consume lets exactly one through; the rest are replays.
    if (code.consumedAt !== undefined || !(await ctx.store.consume('authorization_code', id))) {
      return refuseReplay(ctx, id, code, ip)
    }
    const refreshable = client.grantTypes.has('refresh_token')
    // The refresh token is bound to the whole grant, whatever this access token was narrowed to (RFC 8707 §2.2).
    const grant = await ctx.tokens.startGrant(client, code.sub, code.scope,
      { authTime: code.authTime, refreshable, resource: code.resource, jkt: dpop?.jkt, user })
    await linkGrant(ctx, id, code, grant.grantId)
    // A refresh token only for a client registered for refresh_token (respond checks), scope as granted, and
    // an ID token when that scope holds openid, with the authorization request's nonce (OIDC Core §3.1.3.7).
    const body = await withIdToken(ctx, { client, grant, scope: code.scope, nonce: code.nonce },
      await ctx.tokens.respond(client, grant, { scope: code.scope, withRefresh: true, audience, jkt: dpop?.jkt }))
    // A replay that ran before linkGrant could not find the grant: it left a mark instead. The response
    // still goes out (one redemption succeeds), but its tokens are already dead.
    if (await wasReplayed(ctx, id)) await revokeGrant(ctx, grant.grantId, 'authorization code replayed during its redemption')
    return body
  },
}
