/**
 * grant_type=urn:ietf:params:oauth:grant-type:device_code (RFC 8628 §3.4, §3.5): a device polls with its
 * device_code until the user has decided. The answers, in the order checked: unknown or another client's →
 * invalid_grant; past expires_in → expired_token, before anything else; denied → access_denied; pending →
 * authorization_pending, or slow_down when polled sooner than the interval, which then grows by 5 s for
 * good (§3.5); approved → tokens, once.
 */
import type { VerifiedProof } from '../../dpop/proof.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import { AccessDenied, AuthorizationPending, ExpiredToken, InvalidGrant, InvalidRequest, SlowDown } from '../../errors/oauth-errors.js'
import {
  SLOW_DOWN_STEP_SECONDS, findDeviceCode, linkGrant, recordPoll, redeemDeviceCode, type DeviceCodeRecord,
} from '../device.js'
import { DEVICE_CODE_GRANT_TYPE } from '../grant-types.js'
import { withIdToken } from '../id-token.js'
import { audienceWithin } from '../resource.js'
import { revokeGrant } from '../revoke-grant.js'
import type { TokenResponseBody } from '../tokens.js'
import type { GrantHandler } from './grant.js'

/**
 * The approved code becomes a grant, exactly once. The grant is linked to the code only once its
 * tokens are out: a poll that finds the code redeemed and linked is a replay, and revokes the grant; one
 * that finds it redeemed but not yet linked lost a race with the redeeming poll, and gets nothing.
 */
async function redeem(ctx: AuthServerContext, record: DeviceCodeRecord, client: RegisteredClient,
  audience: readonly string[], dpop: VerifiedProof | undefined): Promise<TokenResponseBody> {
  if (record.redeemed) {
    // As node-oidc-provider's consumeGrantSource: a replayed device_code may have leaked, so its grant is revoked.
    if (record.grantId !== undefined) {
      await revokeGrant(ctx, record.grantId, 'device_code replay')
      ctx.audit.emit('device_code.replay_detected', {
        client_id: record.clientId, ...(record.sub !== undefined && { sub: record.sub }), grant_id: record.grantId, grant_revoked: true,
      })
    }
    throw new InvalidGrant('device_code already redeemed')
  }
  // As at refresh: a user removed from the config since the approval gets nothing.
  const user = record.sub === undefined ? undefined : await ctx.accounts.find(record.sub)
  if (record.sub === undefined || !user) throw new InvalidGrant('the approving user no longer exists')
  // Of parallel polls, the atomic consume lets exactly one through.
  if (!(await redeemDeviceCode(ctx, record))) throw new InvalidGrant('device_code already being redeemed')
  const grant = await ctx.tokens.startGrant(client, record.sub, record.scope,
    { authTime: record.authTime, refreshable: client.grantTypes.has('refresh_token'), resource: record.resource, jkt: dpop?.jkt, user })
  // OIDC Core §3.1.3.3: an ID token when openid was approved; auth_time is the approving login's, and there is no nonce.
  const body = await withIdToken(ctx, { client, grant, scope: record.scope },
    await ctx.tokens.respond(client, grant, { scope: record.scope, withRefresh: true, audience, jkt: dpop?.jkt }))
  await linkGrant(ctx, record, grant.grantId)
  return body
}

export const deviceCodeGrant: GrantHandler = {
  grantType: DEVICE_CODE_GRANT_TYPE,
  parameters: ['device_code'],
  async handle({ form, client, audience: resource, dpop, ctx }) {
    const deviceCode = form.get('device_code')
    if (deviceCode === undefined) throw new InvalidRequest('device_code is required')
    const record = await findDeviceCode(ctx, deviceCode)
    if (!record) throw new InvalidGrant('unknown device_code')
    // Another client's code says nothing about itself (not even that it expired).
    if (record.clientId !== client.clientId) throw new InvalidGrant(`device_code of another client, presented by ${client.clientId}`)
    const now = ctx.now()
    if (record.expiresAt * 1000 <= now) throw new ExpiredToken()
    // RFC 8707 §2.2, as for codes: the poll may narrow the resources asked for at /device_authorization.
    const audience = audienceWithin(ctx.settings, record.resource, resource)
    if (record.status === 'denied') throw new AccessDenied()
    if (record.status === 'approved') return redeem(ctx, record, client, audience, dpop)
    // RFC 8628 §3.5: slow_down is a pending answer, and its longer interval holds for every later poll.
    const tooSoon = record.lastPollAt !== undefined && now - record.lastPollAt < record.interval * 1000
    const interval = tooSoon ? record.interval + SLOW_DOWN_STEP_SECONDS : record.interval
    await recordPoll(ctx, record, interval, now)
    throw tooSoon ? new SlowDown(interval) : new AuthorizationPending()
  },
}
