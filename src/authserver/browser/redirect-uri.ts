/**
 * Which registered redirect URI an authorization request goes back to (checklist ):
 * one exact string comparison, no normalisation of any kind (RFC 9700 §4.1.3; every bypass in §14.1
 * came from a "smarter" comparison), with the one exception RFC 8252 §7.3 requires: for a registered
 * http loopback IP literal, the port may differ; nothing else may.
 */
import type { RegisteredClient } from '../clients.js'

export type RedirectUriMatch =
  | { readonly ok: true; readonly redirectUri: string; readonly wasSent: boolean }
  | { readonly ok: false; readonly reason: string }

/**
 * `http://127.0.0.1:8080/cb?x` → `http://127.0.0.1/cb?x`; undefined unless it is an http loopback IP literal
 * with no port or a port a socket can have: 1-65535, written without leading zeros (issue 16: `:99999`, `:0`
 * and `:05555` passed, and a client library may read them as another port or none).
 */
export function withoutLoopbackPort(uri: string): string | undefined {
  // A-04 [DECISION]: IP literals only; `localhost` may resolve elsewhere (RFC 8252 §8.3).
  const match = /^http:\/\/(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])(?::([1-9]\d{0,4}))?([/?].*)?$/.exec(uri)
  if (!match || (match[2] !== undefined && Number(match[2]) > 65535)) return undefined
  return `http://${match[1]}${match[3] ?? ''}`
}

function matches(registered: string, presented: string): boolean {
  if (registered === presented) return true
  const loopback = withoutLoopbackPort(registered)
  return loopback !== undefined && loopback === withoutLoopbackPort(presented)
}

/** The redirect URI to use, or why there is none; a failure is shown to the user, never redirected to. */
export function matchRedirectUri(client: RegisteredClient, presented: string | undefined): RedirectUriMatch {
  if (presented === undefined) {
    // A-05, OAuth 2.1 §2.3.2: omitted is fine only when there is nothing to choose between.
    if (client.redirectUris.length === 1) return { ok: true, redirectUri: client.redirectUris[0]!, wasSent: false }
    return { ok: false, reason: 'redirect_uri is required: this client has several registered' }
  }
  if (client.redirectUris.some((registered) => matches(registered, presented))) {
    return { ok: true, redirectUri: presented, wasSent: true }
  }
  return { ok: false, reason: 'redirect_uri is not registered for this client' }
}
