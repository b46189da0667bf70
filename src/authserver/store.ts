/** Opens the configured store: SQLite in one file by default; Redis for several instances; memory for tests and throwaway demos. */
import type { FastifyBaseLogger } from 'fastify'
import type { AuthServerSettings } from './settings.js'
import type { StorageAdapter } from './storage/adapter.js'
import { createMemoryAdapter } from './storage/memory.js'
import { createSqliteAdapter } from './storage/sqlite.js'

export async function openStore(settings: AuthServerSettings, now: () => number = Date.now,
  log?: Pick<FastifyBaseLogger, 'info' | 'warn'>): Promise<StorageAdapter> {
  const { type, path, url, prefix } = settings.store
  if (type === 'memory') return createMemoryAdapter({ now })
  if (type === 'redis') {
    // Loaded only when configured: a single-instance gateway never opens a Redis connection.
    const { createRedisAdapter } = await import('./storage/redis.js')
    return createRedisAdapter(url!, { now, prefix, ...(log && { log }) })
  }
  return createSqliteAdapter(path, { now })
}
