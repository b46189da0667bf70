/** The default store: one SQLite file through better-sqlite3, in WAL mode (ARCHITECTURE "Store adapters"). */
import { closeSync, mkdirSync, openSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import type { ArtifactKind, ArtifactRecord, FoundArtifact, StorageAdapter, StorageOptions, StoredArtifact } from './adapter.js'

/** Migration N (1-based) brings the file from `user_version` N-1 to N; append only, never edit. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE artifacts (
     kind        TEXT    NOT NULL,
     id          TEXT    NOT NULL,
     value       TEXT    NOT NULL,  -- JSON
     grant_id    TEXT,
     user_code   TEXT,
     expires_at  INTEGER NOT NULL,  -- ms since the epoch
     consumed_at INTEGER,
     PRIMARY KEY (kind, id)
   );
   CREATE INDEX artifacts_grant_id ON artifacts (grant_id) WHERE grant_id IS NOT NULL;
   CREATE INDEX artifacts_user_code ON artifacts (user_code) WHERE user_code IS NOT NULL;
   CREATE INDEX artifacts_expires_at ON artifacts (expires_at);`,
]

interface Row {
  kind: ArtifactKind
  id: string
  value: string
  expires_at: number
  consumed_at: number | null
}

/**
 * Opens (creating it, mode 0600, with its directories) the SQLite file at `path`, migrated to the latest
 * schema. Expired rows are deleted every `purgeIntervalMs` (default 60 s; 0 turns the timer off).
 */
export function createSqliteAdapter(path: string, options: StorageOptions & { purgeIntervalMs?: number } = {}): StorageAdapter {
  const now = options.now ?? Date.now
  const purgeIntervalMs = options.purgeIntervalMs ?? 60_000
  if (!Number.isFinite(purgeIntervalMs) || purgeIntervalMs < 0) throw new RangeError('purgeIntervalMs must be 0 or a positive number')

  if (path !== ':memory:') {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
    // The file holds signing keys. SQLite gives its -wal and -shm files the mode of the database file.
    closeSync(openSync(path, 'a', 0o600))
  }
  const db = new Database(path)
  db.pragma('journal_mode = WAL')
  // In WAL mode, NORMAL already survives kill -9 (a commit is in the OS page cache before COMMIT returns),
  // but a power loss or kernel crash may roll back the last commits: a consumed refresh token or code
  // would become usable again, and a newly published signing key could vanish. FULL fsyncs the WAL on
  // every commit, so nothing committed is lost to either; the price is one fsync per commit, shared by
  // the writes of one event-loop turn (groupCommit below).
  db.pragma('synchronous = FULL')
  db.pragma('busy_timeout = 5000')
  try {
    migrate(db)
  } catch (error) {
    db.close()
    throw error
  }

  const statements = {
    upsert: db.prepare<[ArtifactKind, string, string, string | null, string | null, number], void>(
      'INSERT OR REPLACE INTO artifacts (kind, id, value, grant_id, user_code, expires_at) VALUES (?, ?, ?, ?, ?, ?)'),
    find: db.prepare<[ArtifactKind, string, number], Row>(
      'SELECT * FROM artifacts WHERE kind = ? AND id = ? AND expires_at > ?'),
    live: db.prepare<[ArtifactKind, string, number], { one: 1 }>('SELECT 1 AS one FROM artifacts WHERE kind = ? AND id = ? AND expires_at > ?'),
    findByUserCode: db.prepare<[string, number], Row>(
      "SELECT * FROM artifacts WHERE kind = 'device_code' AND user_code = ? AND expires_at > ? LIMIT 1"),
    consume: db.prepare<[number, ArtifactKind, string, number], void>(
      'UPDATE artifacts SET consumed_at = ? WHERE kind = ? AND id = ? AND consumed_at IS NULL AND expires_at > ?'),
    destroy: db.prepare<[ArtifactKind, string], void>('DELETE FROM artifacts WHERE kind = ? AND id = ?'),
    revoke: db.prepare<[string, string], Row>(
      "DELETE FROM artifacts WHERE grant_id = ? OR (kind = 'grant' AND id = ?) RETURNING *"),
    list: db.prepare<[ArtifactKind, number], Row>('SELECT * FROM artifacts WHERE kind = ? AND expires_at > ?'),
    purge: db.prepare<[number], void>('DELETE FROM artifacts WHERE expires_at <= ?'),
    ping: db.prepare('SELECT 1'),
  }

  let warned = false
  /** The stored JSON, or undefined when it cannot be read: such a row is treated as missing. */
  const parse = (row: Row): FoundArtifact | undefined => {
    try {
      const value = JSON.parse(row.value) as unknown
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('not an object')
      return row.consumed_at === null ? value as StoredArtifact : { ...value, consumedAt: row.consumed_at }
    } catch {
      // Name the kind only: ids are token hashes, and the value may hold anything.
      if (!warned) process.emitWarning(`unreadable ${row.kind} row in the SQLite store, treated as missing`, 'PortcullisStoreWarning')
      warned = true
      return undefined
    }
  }
  const record = (row: Row, value: FoundArtifact): ArtifactRecord => ({ kind: row.kind, id: row.id, value, expiresAt: row.expires_at })
  const purgeExpired = () => statements.purge.run(now()).changes

  const timer = purgeIntervalMs > 0 ? setInterval(() => { try { purgeExpired() } catch { /* next tick retries */ } }, purgeIntervalMs) : undefined
  timer?.unref()
  const write = groupCommit(db)

  return {
    upsert(kind, id, value, expiresInSeconds) {
      const text = JSON.stringify(value)
      const expiresAt = now() + expiresInSeconds * 1000
      return write(() => { statements.upsert.run(kind, id, text, value.grantId ?? null, value.userCode ?? null, expiresAt) })
    },
    async find(kind, id) {
      const row = statements.find.get(kind, id, now())
      return row && parse(row)
    },
    async findByUserCode(userCode) {
      const row = statements.findByUserCode.get(userCode, now())
      return row && parse(row)
    },
    consume(kind, id) {
      const at = now()
      return write(() => statements.consume.run(at, kind, id, at).changes === 1)
    },
    consumeAndWrite(kind, id, writes, requires) {
      const at = now()
      const rows = writes.map((artifact) => [artifact.kind, artifact.id, JSON.stringify(artifact.value), artifact.value.grantId ?? null,
        artifact.value.userCode ?? null, at + artifact.expiresInSeconds * 1000] as const)
      // A transaction inside the batch's (a savepoint): the consume and the writes commit or roll back together.
      return write(db.transaction(() => {
        if (requires && !statements.live.get(requires.kind, requires.id, at)) return false
        if (statements.consume.run(at, kind, id, at).changes !== 1) return false
        for (const row of rows) statements.upsert.run(...row)
        return true
      }))
    },
    destroy(kind, id) {
      return write(() => { statements.destroy.run(kind, id) })
    },
    revokeByGrantId(grantId) {
      // One statement, so atomic. An unreadable row is deleted too, and still reported so its id can be deny-listed.
      return write(() => statements.revoke.all(grantId, grantId).map((row) => record(row, parse(row) ?? {})))
    },
    async list(kind) {
      return statements.list.all(kind, now()).flatMap((row) => {
        const value = parse(row)
        return value ? [record(row, value)] : []
      })
    },
    async purgeExpired() {
      return purgeExpired()
    },
    async ping() {
      statements.ping.get()
    },
    async close() {
      clearInterval(timer)
      await write.drain()
      if (db.open) db.close()
    },
  }
}

interface PendingWrite {
  readonly run: () => unknown
  readonly resolve: (value: never) => void
  readonly reject: (error: unknown) => void
}

/**
 * Group commit: the writes asked for during one turn of the event loop run in one IMMEDIATE transaction on
 * the next turn, so that concurrent requests share one fsync (synchronous = FULL) instead of paying one
 * each. A caller's promise settles only once the transaction has committed: nothing is answered before it
 * is on disk. Each write keeps its own outcome (a failing statement is undone alone, SQLite's statement
 * atomicity); a failed COMMIT fails every write of the batch. Writes run in the order they were asked for,
 * so a consume is still a compare-and-set: the first consume of an id in a batch wins.
 */
function groupCommit(db: Database.Database): (<T>(run: () => T) => Promise<T>) & { drain(): Promise<void> } {
  let queue: PendingWrite[] = []
  let flushed: Promise<void> | undefined
  const flush = () => {
    const batch = queue
    queue = []
    flushed = undefined
    const outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> = []
    try {
      db.transaction(() => {
        for (const pending of batch) {
          try {
            outcomes.push({ ok: true, value: pending.run() })
          } catch (error) {
            outcomes.push({ ok: false, error })
          }
        }
      }).immediate()
    } catch (error) {
      for (const pending of batch) pending.reject(error)
      return
    }
    batch.forEach((pending, i) => {
      const outcome = outcomes[i]!
      if (outcome.ok) pending.resolve(outcome.value as never)
      else pending.reject(outcome.error)
    })
  }
  const write = <T>(run: () => T): Promise<T> => new Promise<T>((resolve, reject) => {
    queue.push({ run, resolve: resolve as (value: never) => void, reject })
    flushed ??= new Promise<void>((done) => setImmediate(() => { flush(); done() }))
  })
  return Object.assign(write, { drain: async () => { while (flushed) await flushed } })
}

/**
 * Brings the file to the latest `user_version`, in one IMMEDIATE transaction so that two processes opening
 * a new file at once cannot both run a migration.
 */
function migrate(db: Database.Database): void {
  db.transaction(() => {
    const current = db.pragma('user_version', { simple: true }) as number
    if (current > MIGRATIONS.length) throw new Error(`the SQLite store has schema version ${current}; this Portcullis knows up to ${MIGRATIONS.length}`)
    if (current === MIGRATIONS.length) return
    for (const sql of MIGRATIONS.slice(current)) db.exec(sql)
    db.pragma(`user_version = ${MIGRATIONS.length}`)
  }).immediate()
}
