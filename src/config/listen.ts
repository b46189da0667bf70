/** `host:port` values (`server.listen`, `admin.listen`, `decision.listen`), as the schema lets them through. */

/** The host (IPv6 without its brackets) and the port. */
export function parseListen(listen: string): { host: string; port: number } {
  const colon = listen.lastIndexOf(':')
  return { host: listen.slice(0, colon).replace(/^\[|\]$/g, ''), port: Number(listen.slice(colon + 1)) }
}

/** The schema's pattern allows five digits: a port above 65535 would only fail at `listen`. */
export function badPort(listen: string | undefined): boolean {
  return listen !== undefined && parseListen(listen).port > 65535
}
