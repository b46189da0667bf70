/**
 * `cors.allowed_origins`: exact origins, `*`, and one pattern form, `https://*.example.com`. Parsed
 * by hand at load (no URL class: it would normalize what the browser sends byte for byte, and no regex comes
 * from the config); a request's `Origin` is then compared as a string, or checked label by label for a pattern.
 */
import { createRequire } from 'node:module'

/**
 * tldts (the Public Suffix List, 200 KB of CommonJS), loaded only when a pattern is checked: imported from ES modules,
 * node would first scan it for its exports (about 20 ms of every `portcullis check`).
 */
const requireHere = createRequire(import.meta.url)
const publicSuffixOf = (host: string): string | null =>
  (requireHere('tldts') as typeof import('tldts')).getPublicSuffix(host, { allowPrivateDomains: true })

/** One entry of `allowed_origins`, parsed. */
export type AllowedOrigin =
  | { readonly kind: 'any' }
  | { readonly kind: 'exact'; readonly origin: string }
  /** `https://*.example.com:8443`: `prefix` `https://`, `tail` `.example.com:8443`; one or more labels between. */
  | { readonly kind: 'pattern'; readonly prefix: string; readonly tail: string }

/** RFC 1123 host labels, lower case as browsers send them (IDNs arrive as `xn--…`), one or more. */
const LABELS = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/
const IPV6 = /^\[[0-9a-f:.]+\]$/
const PORT = /^[1-9][0-9]{0,4}$/
const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http://': '80', 'https://': '443' }
/** Longer than any origin worth comparing (253-character host, scheme, port): refused without looking. */
const MAX_ORIGIN = 300

/** `*`, an origin or a pattern; or why the entry is not one (the config error's message). */
export function parseAllowedOrigin(text: string): AllowedOrigin | string {
  if (text === '*') return { kind: 'any' }
  if (text === 'null') {
    return 'the origin "null" is what sandboxed iframes, file: pages and cross-origin redirects send: any page can have it, so it is never allowed'
  }
  const prefix = text.startsWith('https://') ? 'https://' : text.startsWith('http://') ? 'http://' : undefined
  if (prefix === undefined) return 'must be an origin, scheme://host[:port] with scheme http or https, or *'
  const rest = text.slice(prefix.length)
  if (rest.includes('@')) return 'has userinfo (user@): an origin is scheme://host[:port] only'
  if (rest.endsWith('/') && rest.indexOf('/') === rest.length - 1) return 'has a trailing slash: an Origin header never ends with /'
  if (/[/?#]/.test(rest)) return 'has a path, query or fragment: an origin is scheme://host[:port] only'
  const colon = rest.startsWith('[') ? rest.indexOf(':', rest.indexOf(']')) : rest.lastIndexOf(':')
  const host = colon === -1 ? rest : rest.slice(0, colon)
  const port = colon === -1 ? undefined : rest.slice(colon + 1)
  if (port !== undefined) {
    if (!PORT.test(port) || Number(port) > 65535) return 'has a bad port: 1 to 65535, without leading zeros'
    if (port === DEFAULT_PORTS[prefix]) return `names the default port :${port}: browsers leave it out, so no Origin would match`
  }
  if (host !== host.toLowerCase()) return 'has upper-case letters: browsers send the host in lower case, so no Origin would match'
  if (host.endsWith('.')) return 'ends with a dot: browsers send the host without it, so no Origin would match'
  const tail = port === undefined ? '' : `:${port}`
  if (host.includes('*')) return parsePattern(prefix, host, tail)
  if (!LABELS.test(host) && !IPV6.test(host)) return 'has a host that is not a DNS name or an IP address'
  return { kind: 'exact', origin: text }
}

/** `*.example.com`: the wildcard is the whole leftmost label, before at least two labels of a DNS name. */
function parsePattern(prefix: string, host: string, port: string): AllowedOrigin | string {
  const suffix = host.slice(2)
  if (!host.startsWith('*.') || suffix.includes('*')) {
    return 'a pattern has "*" as its whole leftmost label only, as in https://*.example.com'
  }
  if (!LABELS.test(suffix) || /^[0-9]+$/.test(suffix.slice(suffix.lastIndexOf('.') + 1))) {
    return 'a pattern\'s "*." must be followed by a DNS name'
  }
  if (!suffix.includes('.')) return `a pattern needs two labels after "*." (*.${suffix} would allow every site under a top-level domain)`
  // The Public Suffix List, private section included: *.co.uk, *.github.io and *.herokuapp.com are other people's sites.
  if (publicSuffixOf(suffix) === suffix) {
    return `*.${suffix} would allow every site under a public suffix (Public Suffix List): name a domain registered under it`
  }
  return { kind: 'pattern', prefix, tail: `.${suffix}${port}` }
}

/**
 * Whether a request's `Origin` is the pattern's scheme, one or more DNS labels, then the pattern's domain and
 * port exactly: never the domain itself, a look-alike (`evil-example.com`), a longer name
 * (`example.com.evil.com`), a trailing dot, userinfo, a path, a list, or anything with a control character.
 */
export function matchesPattern(origin: string, pattern: { readonly prefix: string; readonly tail: string }): boolean {
  const end = origin.length - pattern.tail.length
  if (origin.length > MAX_ORIGIN || end <= pattern.prefix.length || !origin.startsWith(pattern.prefix) || !origin.endsWith(pattern.tail)) {
    return false
  }
  return LABELS.test(origin.slice(pattern.prefix.length, end))
}
