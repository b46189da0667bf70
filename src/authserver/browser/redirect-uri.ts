/**
 * Which registered redirect URI an authorization request goes back to (RFC 6749 §3.1.2):
 * one exact string comparison, no normalisation of any kind (RFC 9700 §4.1.3; the known bypasses, such as
 * fosite's CVE-2020-15234 and Keycloak's CVE-2026-3872, came from a "smarter" comparison), with the one
 * exception RFC 8252 §7.3 requires: for a registered http loopback IP literal, the port may differ;
 * nothing else may. The same for a registered `http://localhost` (a client that registered itself under
 * the opt-in `localhost` form), and only localhost for localhost: the host itself is never swapped.
 */
import type { RegisteredClient } from '../registered-client.js'

export type RedirectUriMatch =
  | { readonly ok: true; readonly redirectUri: string; readonly wasSent: boolean }
  | { readonly ok: false; readonly reason: string }

/** The port, when there is one, is 1-65535 without leading zeros; the rest is kept as written. */
const LOOPBACK_LITERAL = /^http:\/\/(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])(?::([1-9]\d{0,4}))?([/?].*)?$/
/** Exactly `localhost` in lowercase: not `LOCALHOST`, `localhost.`, `localhost.evil.com` nor any user information. */
const LOCALHOST = /^http:\/\/(localhost)(?::([1-9]\d{0,4}))?([/?].*)?$/

function withoutPort(pattern: RegExp, uri: string): string | undefined {
  const match = pattern.exec(uri)
  if (!match || (match[2] !== undefined && Number(match[2]) > 65535)) return undefined
  return `http://${match[1]}${match[3] ?? ''}`
}

/**
 * `http://127.0.0.1:8080/cb?x` → `http://127.0.0.1/cb?x`; undefined unless it is an http loopback IP literal
 * with no port or a port a socket can have: 1-65535, written without leading zeros (`:99999`, `:0` and
 * `:05555` are refused: a client library may read them as another port or none).
 */
export function withoutLoopbackPort(uri: string): string | undefined {
  // IP literals only (RFC 8252 §7.3); `localhost` may resolve elsewhere (RFC 8252 §8.3), see below.
  return withoutPort(LOOPBACK_LITERAL, uri)
}

/**
 * `http://localhost:8080/cb` → `http://localhost/cb`, with the port rules of {@link withoutLoopbackPort};
 * undefined for anything else. MCP clients register localhost (the MCP spec allows "localhost or
 * HTTPS"), so a server may opt in to it despite RFC 8252 §8.3's NOT RECOMMENDED; YAML clients never can.
 */
export function withoutLocalhostPort(uri: string): string | undefined {
  return withoutPort(LOCALHOST, uri)
}

/** Whether the URI is http on this computer: a loopback IP literal or localhost (the consent page warns of such clients). */
export function isLocalRedirectUri(uri: string): boolean {
  return withoutLoopbackPort(uri) !== undefined || withoutLocalhostPort(uri) !== undefined
}

/** Each side stripped of its port by the same rule: a loopback literal never matches localhost, nor the reverse. */
function matches(registered: string, presented: string): boolean {
  if (registered === presented) return true
  return [withoutLoopbackPort, withoutLocalhostPort].some((strip) => {
    const portless = strip(registered)
    return portless !== undefined && portless === strip(presented)
  })
}

/** The redirect URI to use, or why there is none; a failure is shown to the user, never redirected to (RFC 6749 §4.1.2.1). */
export function matchRedirectUri(client: RegisteredClient, presented: string | undefined): RedirectUriMatch {
  if (presented === undefined) {
    // OAuth 2.1 §2.3.2: omitted is fine only when there is nothing to choose between.
    if (client.redirectUris.length === 1) return { ok: true, redirectUri: client.redirectUris[0]!, wasSent: false }
    return { ok: false, reason: 'redirect_uri is required: this client has several registered' }
  }
  if (client.redirectUris.some((registered) => matches(registered, presented))) {
    return { ok: true, redirectUri: presented, wasSent: true }
  }
  return { ok: false, reason: 'redirect_uri is not registered for this client' }
}
