/**
 * Which redirect URIs a client may register for itself (RFC 6749 §3.1.2, RFC 7591 §2, RFC 8252 §7,
 * RFC 9700 §2.6), and of which form: a loopback IP literal over http (any port is then accepted when
 * redirecting, RFC 8252 §7.3), `http://localhost` (the same, as MCP clients use it; allowed only where
 * `registration.policy.redirect_uris` lists it),
 * https, or a private-use scheme named after a reverse domain (RFC 8252 §7.1). Stricter than the YAML's
 * check (config/lint-authserver.ts): the registrant is anyone, so the URI must be exactly one string a
 * browser and browser/redirect-uri.ts read the same way.
 */
import { withoutLocalhostPort, withoutLoopbackPort } from '../browser/redirect-uri.js'

export type RedirectUriForm = 'loopback' | 'localhost' | 'https' | 'private_use'

/**
 * The forms allowed when the configuration lists none. Not localhost: RFC 8252 §8.3 finds it NOT
 * RECOMMENDED (the name may resolve off the machine, or a firewall may let another program answer).
 */
export const DEFAULT_REDIRECT_URI_FORMS: readonly RedirectUriForm[] = ['loopback', 'https', 'private_use']

const MAX_URI_LENGTH = 2000
/** RFC 8252 §7.1: `com.example.app`; at least one dot, so no `http`, `javascript`, `ms-settings`… */
const REVERSE_DOMAIN = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$/
const NEVER = new Set(['javascript', 'data', 'vbscript', 'file', 'blob', 'about', 'filesystem'])

/** Why a URI of a form the configuration leaves out is refused; for localhost, what to register instead. */
export function formNotAllowed(form: RedirectUriForm): string {
  if (form === 'localhost') return 'localhost redirect URIs may not be registered here: use http://127.0.0.1 or http://[::1] (RFC 8252 section 8.3)'
  return `${form.replace('_', '-')} redirect URIs may not be registered here`
}

/** http is for this computer only, named exactly as browser/redirect-uri.ts matches it. */
function httpForm(uri: string, url: URL): { form: RedirectUriForm } | { problem: string } {
  if (withoutLoopbackPort(uri) !== undefined) return { form: 'loopback' }
  if (withoutLocalhostPort(uri) !== undefined) return { form: 'localhost' }
  // The parser lowercases LOCALHOST and decodes localhos%74; the string itself must already be what is compared.
  if (url.hostname === 'localhost') return { problem: 'may name localhost only as exactly http://localhost (lowercase, not percent-encoded), with a port of 1-65535 or none' }
  return { problem: 'may use http only for http://127.0.0.1 or http://[::1] with a port of 1-65535 or none (RFC 8252 section 7.3); use https' }
}

/** The URI's form, or why it may not be registered (a phrase that follows its name; no part of the URI in it). */
export function redirectUriForm(uri: string): { form: RedirectUriForm } | { problem: string } {
  if (uri.length > MAX_URI_LENGTH) return { problem: `must be at most ${MAX_URI_LENGTH} characters` }
  // Spaces, controls and non-ASCII would be trimmed or encoded by a URL parser: percent-encode them instead.
  if (!/^[\x21-\x7e]+$/.test(uri)) return { problem: 'must be printable ASCII without spaces (percent-encode anything else)' }
  if (uri.includes('#')) return { problem: 'must not contain a fragment (RFC 6749 section 3.1.2)' }
  if (uri.includes('*')) return { problem: 'must not contain a wildcard' }
  if (!URL.canParse(uri)) return { problem: 'must be an absolute URI' }
  const url = new URL(uri)
  const scheme = url.protocol.slice(0, -1)
  if (NEVER.has(scheme)) return { problem: `must not use the ${scheme}: scheme` }
  if (!uri.startsWith(`${scheme}:`)) return { problem: 'must have a lowercase scheme' }
  if (url.username !== '' || url.password !== '') return { problem: 'must not contain user information' }
  if (scheme === 'http') return httpForm(uri, url)
  if (scheme === 'https') return { form: 'https' }
  if (!REVERSE_DOMAIN.test(scheme)) return { problem: 'must use https, http on a loopback IP literal, or a private-use scheme that is a reverse domain name such as com.example.app (RFC 8252 section 7.1)' }
  return { form: 'private_use' }
}
