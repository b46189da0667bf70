/**
 * grant_type=password (RFC 6749 §4.3; off unless enabled, RFC 9700 §2.4), for first-party clients
 * registered for it: a wrong username and a wrong password look and take the same (UserDirectory.verify),
 * and failures are throttled per username and per source address (RFC 6749 §4.3.2, the same Throttle as
 * client authentication), each attempt counted before its password is checked.
 */
import { InvalidGrant, InvalidRequest, UnauthorizedClient } from '../../errors/oauth-errors.js'
import { withIdToken } from '../id-token.js'
import { grantScope } from '../scope.js'
import { verifyThrottled } from '../throttle.js'
import type { GrantHandler } from './grant.js'

export const passwordGrant: GrantHandler = {
  grantType: 'password',
  parameters: ['username', 'password', 'scope'],
  async handle({ form, client, ip, audience: resource, dpop, ctx }) {
    // RFC 9700 §2.4: the resource owner hands its password to the client, so only our own clients may ask.
    if (!client.firstParty) throw new UnauthorizedClient(`client ${client.clientId} is not first-party`)
    const username = form.get('username')
    const password = form.get('password')
    if (username === undefined || password === undefined) throw new InvalidRequest('username and password are required')
    // Before the password is checked: a bad scope costs no scrypt and counts as no failure.
    const scope = grantScope(form.get('scope'), client.scopes)
    // Counted before the scrypt (so parallel guesses see each other), given back only when the password is right.
    const user = await verifyThrottled(ctx.throttle, [`user:${username}`, `ip:${ip}`], () => ctx.users.verify(username, password))
    if (!user) {
      ctx.audit.emit('login.failed', { username: username.slice(0, 64), reason: 'invalid_credentials', ip })
      // One response for an unknown user and a wrong password (no enumeration); the log knows which key failed.
      throw new InvalidGrant(`wrong username or password for ${JSON.stringify(username.slice(0, 64))}`)
    }
    // The user authenticated just now: that is the grant's auth_time. The resources named here are the
    // grant's, which its refreshes may narrow (RFC 8707 §2.2); without any, the configured audience.
    const grant = await ctx.tokens.startGrant(client, user.sub, scope, { authTime: Math.floor(ctx.now() / 1000), resource, jkt: dpop?.jkt, user })
    // OIDC Core §3.1.3.3: an ID token when openid is granted, without nonce (there was no authorization request).
    return withIdToken(ctx, { client, grant, scope },
      await ctx.tokens.respond(client, grant, { scope, withRefresh: true, audience: resource ?? ctx.settings.audience, jkt: dpop?.jkt }))
  },
}
