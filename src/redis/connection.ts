/**
 * Every Redis connection of Portcullis (the store, the revocation channel, the shared throttle counters)
 * is made here, from `store.url` (redis-url.ts: one server, Sentinel, or Cluster).
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import { parseClusterUrl, parseSentinelUrl } from './url.js'

/** What the callers use of a connection: the commands, events, scripts and closing of ioredis. */
export type RedisClient = Redis | Cluster

/** A client for `url` with these options (timeouts, queueing, retries: the caller's). */
export function connectRedis(url: string, options: RedisOptions = {}): RedisClient {
  const sentinel = parseSentinelUrl(url)
  if (sentinel) {
    return new Redis({
      ...options,
      sentinels: [...sentinel.sentinels],
      name: sentinel.name,
      ...(sentinel.username !== undefined && { username: sentinel.username }),
      ...(sentinel.password !== undefined && { password: sentinel.password }),
      ...(sentinel.db !== undefined && { db: sentinel.db }),
      ...(sentinel.tls && { tls: {} }),
    })
  }
  const cluster = parseClusterUrl(url)
  if (!cluster) return new Redis(url, options)
  // The cluster-wide options are the Cluster's own; the rest applies to each node's connection.
  const { lazyConnect, enableOfflineQueue, retryStrategy, ...perNode } = options
  return new Cluster([...cluster.nodes], {
    ...(lazyConnect !== undefined && { lazyConnect }),
    ...(enableOfflineQueue !== undefined && { enableOfflineQueue }),
    ...(retryStrategy && { clusterRetryStrategy: (attempt: number) => retryStrategy(attempt) }),
    // A command sent during a failover waits this long per redirection, within the caller's commandTimeout.
    retryDelayOnFailover: 100,
    redisOptions: {
      ...perNode,
      ...(cluster.username !== undefined && { username: cluster.username }),
      ...(cluster.password !== undefined && { password: cluster.password }),
      ...(cluster.tls && { tls: {} }),
    },
  })
}
