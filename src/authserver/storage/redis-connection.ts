/**
 * Every Redis connection of Portcullis (the store, the revocation channel, the shared throttle counters)
 * is made here, from `store.url` (redis-url.ts: one server, or Sentinel).
 */
import { Redis, type RedisOptions } from 'ioredis'
import { parseSentinelUrl } from './redis-url.js'

/** A client for `url` with these options (timeouts, queueing, retries: the caller's). */
export function connectRedis(url: string, options: RedisOptions = {}): Redis {
  const sentinel = parseSentinelUrl(url)
  if (!sentinel) return new Redis(url, options)
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
