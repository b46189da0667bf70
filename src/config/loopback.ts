/**
 * Whether a URL's host is loopback (an IPv4 literal in 127.0.0.0/8, ::1 with or without brackets, localhost): where
 * http:// is tolerated. A name that merely starts with `127.` (`127.0.0.1.example.com`) is a name, not loopback.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '')
  return bare === 'localhost' || bare === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare)
}
