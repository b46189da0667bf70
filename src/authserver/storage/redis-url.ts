/**
 * Redis URLs (`store.url`), parsed without loading a client, so `portcullis check` stays light:
 * - `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS): one server, as ioredis reads it;
 * - `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]` (`rediss+sentinel://` for TLS
 *   to the data nodes): Redis Sentinel, which names the current primary and follows its failovers. The
 *   password is the data nodes'; the sentinels are asked without one.
 */
const SENTINEL = /^(rediss?)\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@]+)\/([^/]+)(?:\/(\d+))?$/

export interface SentinelAddress {
  readonly sentinels: ReadonlyArray<{ host: string; port: number }>
  readonly name: string
  readonly username?: string
  readonly password?: string
  readonly db?: number
  readonly tls: boolean
}

/** The parts of a `redis+sentinel://` URL, or undefined when it is not one (or is malformed). */
export function parseSentinelUrl(url: string): SentinelAddress | undefined {
  const match = SENTINEL.exec(url)
  if (!match) return undefined
  const [, scheme, username, password, hosts, name, db] = match
  const sentinels: Array<{ host: string; port: number }> = []
  for (const entry of hosts!.split(',')) {
    const at = /^(\[[^\]]+\]|[^:,[\]]+)(?::(\d{1,5}))?$/.exec(entry)
    if (!at) return undefined
    sentinels.push({ host: at[1]!.replace(/^\[|\]$/g, ''), port: at[2] === undefined ? 26379 : Number(at[2]) })
  }
  return {
    sentinels,
    name: decodeURIComponent(name!),
    ...(username !== undefined && username !== '' && { username: decodeURIComponent(username) }),
    ...(password !== undefined && { password: decodeURIComponent(password) }),
    ...(db !== undefined && { db: Number(db) }),
    tls: scheme === 'rediss',
  }
}

/** Whether `url` is one this module connects to (config lint). */
export function isRedisUrl(url: string): boolean {
  if (parseSentinelUrl(url) !== undefined) return true
  return URL.canParse(url) && ['redis:', 'rediss:'].includes(new URL(url).protocol)
}

/** Where it connects, without credentials, for messages and logs. */
export function describeRedisUrl(url: string): string {
  const sentinel = parseSentinelUrl(url)
  if (sentinel) return `sentinel ${sentinel.name} at ${sentinel.sentinels.map(({ host, port }) => `${host}:${port}`).join(',')}`
  try {
    const { protocol, host } = new URL(url)
    return `${protocol}//${host}`
  } catch {
    return 'the configured URL'
  }
}
