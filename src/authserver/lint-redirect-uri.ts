/** Which redirect URIs may be registered (RFC 6749 §3.1.2, RFC 8252 §7, RFC 9700 §2.6): for the code flow and for logout alike. */

function isLoopbackLiteral(hostname: string): boolean {
  return hostname === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname)
}

/** Why this redirect URI may not be registered, if it may not. */
export function redirectUriProblem(uri: string): string | undefined {
  if (uri.includes('*')) return 'must not contain a wildcard'
  if (uri.includes('#')) return 'must not contain a fragment'
  if (!URL.canParse(uri)) return 'must be an absolute URI'
  const url = new URL(uri)
  const scheme = url.protocol.slice(0, -1).toLowerCase()
  if (scheme === 'javascript' || scheme === 'data' || scheme === 'vbscript' || scheme === 'file') return `must not use the ${scheme}: scheme`
  if (scheme === 'http') {
    if (!isLoopbackLiteral(url.hostname)) return 'http: is only allowed for loopback IP literals (127.0.0.1, [::1]); use https:'
    return undefined
  }
  if (scheme === 'https') return url.hostname === '' ? 'must name a host' : undefined
  // RFC 8252 §7.1: private-use schemes are reverse domain names (com.example.app:/callback).
  if (!scheme.includes('.')) return `private-use scheme "${scheme}:" must be a reverse domain name such as com.example.app`
  return undefined
}

