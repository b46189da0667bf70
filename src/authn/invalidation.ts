/** What to drop from the token caches, and which cached principals a selector matches. */
import type { Principal } from '../common/principal.js'

/** What to drop from the caches: one token (raw or by its hash), or every token of a jti, subject or client. */
export interface InvalidationSelector {
  token?: string
  /** `tokenHash(token)`: base64url SHA-256, as stores of revoked tokens keep it. */
  tokenHash?: string
  jti?: string
  sub?: string
  client_id?: string
  /** Every token of this issuer (a reconnect to the shared store may have missed revocations). */
  issuer?: string
}

/** Whether a principal is one of the selector's jti, subject, client or issuer; undefined when it names none of them. */
export function principalMatcher(selector: InvalidationSelector): ((principal: Principal) => boolean) | undefined {
  const { jti, sub, client_id: clientId, issuer } = selector
  if (jti === undefined && sub === undefined && clientId === undefined && issuer === undefined) return undefined
  return (principal: Principal) =>
    (issuer !== undefined && principal.issuer === issuer) ||
    (jti !== undefined && principal.jti === jti) ||
    (sub !== undefined && principal.subject === sub) ||
    (clientId !== undefined && principal.clientId === clientId)
}
