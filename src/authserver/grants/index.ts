/** The grant map of the token endpoint: grant_type → module (STYLE §5). */
import type { GrantHandler } from './grant.js'
import { authorizationCodeGrant } from './authorization-code.js'
import { clientCredentialsGrant } from './client-credentials.js'
import { deviceCodeGrant } from './device-code.js'
import { passwordGrant } from './password.js'
import { refreshTokenGrant } from './refresh-token.js'

export function createGrantMap(): ReadonlyMap<string, GrantHandler> {
  return new Map([authorizationCodeGrant, clientCredentialsGrant, refreshTokenGrant, passwordGrant, deviceCodeGrant].map((grant) => [grant.grantType, grant]))
}
