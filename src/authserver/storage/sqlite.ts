/**
 * The default store: one SQLite file through better-sqlite3, in WAL mode (docs/architecture.md); its commits
 * run on a writer thread where there is one (sqlite-commit.ts), its reads on the event loop.
 */
import { closeSync, mkdirSync, openSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import type { ArtifactKind, ArtifactRecord, FoundArtifact, StorageAdapter, StorageOptions, StoredArtifact } from './adapter.js'
import { inlineCommit, threadCommit, writerThreadFor } from './sqlite-commit.js'
import { configureConnection, prepareWrites, type Row, type UpsertRow } from './sqlite-writes.js'

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
  configureConnection(db)
  try {
    migrate(db)
  } catch (error) {
    db.close()
    throw error
  }

  const statements = {
    find: db.prepare<[ArtifactKind, string, number], Row>(
      'SELECT * FROM artifacts WHERE kind = ? AND id = ? AND expires_at > ?'),
    findByUserCode: db.prepare<[string, number], Row>(
      "SELECT * FROM artifacts WHERE kind = 'device_code' AND user_code = ? AND expires_at > ? LIMIT 1"),
    list: db.prepare<[ArtifactKind, number], Row>('SELECT * FROM artifacts WHERE kind = ? AND expires_at > ?'),
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
  // The commits run on the writer thread where there is one (sqlite-commit.ts); reads stay on this connection,
  // which WAL lets read while the writer writes.
  const committer = writerThreadFor(path) ? threadCommit(path) : inlineCommit(db, prepareWrites(db))
  const write = committer.write
  const row = (kind: ArtifactKind, id: string, value: StoredArtifact, expiresInSeconds: number, at: number): UpsertRow =>
    [kind, id, JSON.stringify(value), value.grantId ?? null, value.userCode ?? null, at + expiresInSeconds * 1000]
  const purgeExpired = async () => await write({ op: 'purge', at: now() }) as number

  const timer = purgeIntervalMs > 0 ? setInterval(() => { purgeExpired().catch(() => { /* the next run retries */ }) }, purgeIntervalMs) : undefined
  timer?.unref()

  return {
    async upsert(kind, id, value, expiresInSeconds) {
      await write({ op: 'upsert', row: row(kind, id, value, expiresInSeconds, now()) })
    },
    async find(kind, id) {
      const row = statements.find.get(kind, id, now())
      return row && parse(row)
    },
    async findByUserCode(userCode) {
      const row = statements.findByUserCode.get(userCode, now())
      return row && parse(row)
    },
    async consume(kind, id) {
      return await write({ op: 'consume', kind, id, at: now() }) as boolean
    },
    async consumeAndWrite(kind, id, writes, requires) {
      const at = now()
      const rows = writes.map((artifact) => row(artifact.kind, artifact.id, artifact.value, artifact.expiresInSeconds, at))
      return await write({ op: 'consumeAndWrite', kind, id, at, rows, requires }) as boolean
    },
    async destroy(kind, id) {
      await write({ op: 'destroy', kind, id })
    },
    async revokeByGrantId(grantId) {
      // An unreadable row is deleted too, and still reported so its id can be deny-listed.
      const rows = await write({ op: 'revoke', grantId }) as Row[]
      return rows.map((row) => record(row, parse(row) ?? {}))
    },
    async list(kind) {
      return statements.list.all(kind, now()).flatMap((row) => {
        const value = parse(row)
        return value ? [record(row, value)] : []
      })
    },
    purgeExpired,
    async ping() {
      statements.ping.get()
    },
    async close() {
      clearInterval(timer)
      await committer.close()
      if (db.open) db.close()
    },
  }
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
