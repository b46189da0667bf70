/**
 * Redis URLs (`store.url`), parsed without loading a client, so `portcullis check` stays light:
 * - `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS): one server, as ioredis reads it;
 * - `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]` (`rediss+sentinel://` for TLS
 *   to the data nodes): Redis Sentinel, which names the current primary and follows its failovers. The
 *   password is the data nodes'; the sentinels are asked without one.
 * - `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for TLS): Redis Cluster;
 *   the nodes listed are where discovery starts (any one that answers is enough), ioredis then follows the
 *   slot map, MOVED/ASK redirections and failovers. Cluster has one database: no `/db`.
 */
const SENTINEL = /^(rediss?)\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@]+)\/([^/]+)(?:\/(\d+))?$/
const CLUSTER = /^(rediss?)\+cluster:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@]+)\/?$/

export interface HostPort { readonly host: string; readonly port: number }

interface Credentials {
  readonly username?: string
  readonly password?: string
  readonly tls: boolean
}

export interface SentinelAddress extends Credentials {
  readonly sentinels: readonly HostPort[]
  readonly name: string
  readonly db?: number
}

export interface ClusterAddress extends Credentials {
  readonly nodes: readonly HostPort[]
}

/** `host[:port],…` (IPv6 literals in brackets), or undefined when one entry is malformed. */
function hostList(hosts: string, defaultPort: number): HostPort[] | undefined {
  const list: HostPort[] = []
  for (const entry of hosts.split(',')) {
    const at = /^(\[[^\]]+\]|[^:,[\]]+)(?::(\d{1,5}))?$/.exec(entry)
    if (!at) return undefined
    const port = at[2] === undefined ? defaultPort : Number(at[2])
    if (port < 1 || port > 65535) return undefined
    list.push({ host: at[1]!.replace(/^\[|\]$/g, ''), port })
  }
  return list
}

function credentials(scheme: string, username: string | undefined, password: string | undefined): Credentials {
  return {
    ...(username !== undefined && username !== '' && { username: decodeURIComponent(username) }),
    ...(password !== undefined && { password: decodeURIComponent(password) }),
    tls: scheme === 'rediss',
  }
}

/** The parts of a `redis+sentinel://` URL, or undefined when it is not one (or is malformed). */
export function parseSentinelUrl(url: string): SentinelAddress | undefined {
  const match = SENTINEL.exec(url)
  if (!match) return undefined
  const [, scheme, username, password, hosts, name, db] = match
  const sentinels = hostList(hosts!, 26379)
  if (!sentinels) return undefined
  return { sentinels, name: decodeURIComponent(name!), ...(db !== undefined && { db: Number(db) }), ...credentials(scheme!, username, password) }
}

/** The parts of a `redis+cluster://` URL, or undefined when it is not one (or is malformed). */
export function parseClusterUrl(url: string): ClusterAddress | undefined {
  const match = CLUSTER.exec(url)
  if (!match) return undefined
  const [, scheme, username, password, hosts] = match
  const nodes = hostList(hosts!, 6379)
  return nodes && { nodes, ...credentials(scheme!, username, password) }
}

/** Whether `url` is one this module connects to (config lint). */
export function isRedisUrl(url: string): boolean {
  if (parseSentinelUrl(url) !== undefined || parseClusterUrl(url) !== undefined) return true
  return URL.canParse(url) && ['redis:', 'rediss:'].includes(new URL(url).protocol)
}

/** Where it connects, without credentials, for messages and logs. */
export function describeRedisUrl(url: string): string {
  const list = (hosts: readonly HostPort[]) => hosts.map(({ host, port }) => `${host.includes(':') ? `[${host}]` : host}:${port}`).join(',')
  const sentinel = parseSentinelUrl(url)
  if (sentinel) return `sentinel ${sentinel.name} at ${list(sentinel.sentinels)}`
  const cluster = parseClusterUrl(url)
  if (cluster) return `cluster at ${list(cluster.nodes)}`
  try {
    const { protocol, host } = new URL(url)
    return `${protocol}//${host}`
  } catch {
    return 'the configured URL'
  }
}
