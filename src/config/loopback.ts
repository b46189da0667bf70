/** Whether a URL's host is loopback (127.0.0.0/8, ::1 with or without brackets, localhost): where http:// is tolerated. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '')
  return bare === 'localhost' || bare === '::1' || /^127\./.test(bare)
}
