/**
 * Whether a URL's host is loopback (an IPv4 literal in 127.0.0.0/8, ::1 with or without brackets, localhost): where
 * http:// is tolerated. A name that merely starts with `127.` (`127.0.0.1.example.com`) is a name, not loopback.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '')
  return bare === 'localhost' || bare === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare)
}

/** The host of an http:// URL that is not loopback (127.0.0.0/8, ::1, localhost), else undefined: where a key, token or secret would cross the network in clear text. */
export function cleartextHost(value: string | undefined): string | undefined {
  if (!value?.startsWith('http://') || !URL.canParse(value)) return undefined
  const url = new URL(value)
  return isLoopbackHost(url.hostname) ? undefined : url.host
}
