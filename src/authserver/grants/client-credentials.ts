/**
 * grant_type=client_credentials (RFC 6749 §4.4): confidential clients only, a scope within the client's
 * registration or all of it when omitted, never `openid`, no refresh token (§4.4.3), and the client is its
 * own subject (RFC 9068 §2.2).
 */
import { InvalidScope, UnauthorizedClient } from '../../errors/oauth-errors.js'
import { grantScope, parseScope } from '../scope.js'
import type { GrantHandler } from './grant.js'

/** OIDC scopes describe a user; a client acting for itself has none. */
const OPENID = 'openid'

export const clientCredentialsGrant: GrantHandler = {
  grantType: 'client_credentials',
  parameters: ['scope'],
  async handle({ form, client, audience: resource, dpop, ctx }) {
    // RFC 6749 §4.4: only a client that authenticated may act on its own behalf.
    if (!client.confidential) throw new UnauthorizedClient(`public client ${client.clientId} cannot use client_credentials`)
    const requested = form.get('scope')
    if (requested !== undefined && parseScope(requested).includes(OPENID)) {
      throw new InvalidScope('openid is not available to client_credentials')
    }
    // Omitted: every registered scope except openid, which a client may also hold for its browser flows.
    const scope = grantScope(requested, [...client.scopes].filter((name) => name !== OPENID))
    const grant = await ctx.tokens.startGrant(client, client.clientId, scope, { refreshable: false })
    // RFC 8707 §2.2: any resource clients may ask for; without one, the configured audience.
    return ctx.tokens.respond(client, grant, { scope, withRefresh: false, audience: resource ?? ctx.settings.audience, jkt: dpop?.jkt })
  },
}
