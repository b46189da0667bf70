/** Opens the configured store: SQLite in one file by default; memory for tests and throwaway demos. */
import type { AuthServerSettings } from './settings.js'
import type { StorageAdapter } from './storage/adapter.js'
import { createMemoryAdapter } from './storage/memory.js'
import { createSqliteAdapter } from './storage/sqlite.js'

export async function openStore(settings: AuthServerSettings, now: () => number = Date.now): Promise<StorageAdapter> {
  if (settings.store.type === 'memory') return createMemoryAdapter({ now })
  return createSqliteAdapter(settings.store.path, { now })
}
