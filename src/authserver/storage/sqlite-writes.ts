/**
 * The SQLite store's writes as data, so that they can run on the thread that asked or on the writer thread
 * (sqlite-writer.ts) alike: a batch runs in one IMMEDIATE transaction, each write keeps its own outcome.
 */
import type Database from 'better-sqlite3'
import type { ArtifactKind } from './adapter.js'

/** One row as `artifacts` holds it: kind, id, value (JSON text), grant_id, user_code, expires_at (ms). */
export type UpsertRow = [ArtifactKind, string, string, string | null, string | null, number]

/** What the `artifacts` table gives back (revokeByGrantId returns the rows it deleted). */
export interface Row {
  kind: ArtifactKind
  id: string
  value: string
  expires_at: number
  consumed_at: number | null
}

export type WriteOp =
  | { readonly op: 'upsert'; readonly row: UpsertRow }
  | { readonly op: 'consume'; readonly kind: ArtifactKind; readonly id: string; readonly at: number }
  | { readonly op: 'consumeAndWrite'; readonly kind: ArtifactKind; readonly id: string; readonly at: number;
      readonly rows: readonly UpsertRow[]; readonly requires?: { readonly kind: ArtifactKind; readonly id: string } | undefined }
  | { readonly op: 'destroy'; readonly kind: ArtifactKind; readonly id: string }
  | { readonly op: 'revoke'; readonly grantId: string }
  | { readonly op: 'purge'; readonly at: number }

/** A write's outcome; an error as plain fields, so that it crosses threads as it is (no stack, no values bound). */
export type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: WriteError }
export interface WriteError { readonly name: string; readonly message: string; readonly code?: string | undefined }

/**
 * The settings every connection to the file uses, the event loop's and the writer thread's. In WAL mode, NORMAL
 * already survives kill -9 (a commit is in the OS page cache before COMMIT returns), but a power loss or kernel
 * crash may roll back the last commits: a consumed refresh token or code would become usable again, and a newly
 * published signing key could vanish. FULL fsyncs the WAL on every commit, so nothing committed is lost to either;
 * the price is one fsync per commit, shared by the writes of one batch (sqlite-commit.ts). A lock another process
 * holds is waited for up to 5 s.
 */
export function configureConnection(db: Database.Database): void {
  db.pragma('synchronous = FULL')
  db.pragma('busy_timeout = 5000')
}

/** The writes of one connection, prepared once. */
export function prepareWrites(db: Database.Database): (op: WriteOp) => unknown {
  const upsert = db.prepare<UpsertRow, void>(
    'INSERT OR REPLACE INTO artifacts (kind, id, value, grant_id, user_code, expires_at) VALUES (?, ?, ?, ?, ?, ?)')
  const live = db.prepare<[ArtifactKind, string, number], { one: 1 }>('SELECT 1 AS one FROM artifacts WHERE kind = ? AND id = ? AND expires_at > ?')
  const consume = db.prepare<[number, ArtifactKind, string, number], void>(
    'UPDATE artifacts SET consumed_at = ? WHERE kind = ? AND id = ? AND consumed_at IS NULL AND expires_at > ?')
  const destroy = db.prepare<[ArtifactKind, string], void>('DELETE FROM artifacts WHERE kind = ? AND id = ?')
  const revoke = db.prepare<[string, string], Row>("DELETE FROM artifacts WHERE grant_id = ? OR (kind = 'grant' AND id = ?) RETURNING *")
  const purge = db.prepare<[number], void>('DELETE FROM artifacts WHERE expires_at <= ?')
  // A transaction inside the batch's (a savepoint): the consume and the writes commit or roll back together.
  const consumeAndWrite = db.transaction((op: Extract<WriteOp, { op: 'consumeAndWrite' }>) => {
    if (op.requires && !live.get(op.requires.kind, op.requires.id, op.at)) return false
    if (consume.run(op.at, op.kind, op.id, op.at).changes !== 1) return false
    for (const row of op.rows) upsert.run(...row)
    return true
  })
  return (op) => {
    switch (op.op) {
      case 'upsert': upsert.run(...op.row); return undefined
      case 'consume': return consume.run(op.at, op.kind, op.id, op.at).changes === 1
      case 'consumeAndWrite': return consumeAndWrite(op)
      case 'destroy': destroy.run(op.kind, op.id); return undefined
      // One statement, so atomic.
      case 'revoke': return revoke.all(op.grantId, op.grantId)
      case 'purge': return purge.run(op.at).changes
    }
  }
}

/**
 * Runs a batch in one IMMEDIATE transaction, in the order given (so a consume stays a compare-and-set: the
 * first consume of an id wins). A failing statement is undone alone (SQLite's statement atomicity) and fails
 * its write only; a failed COMMIT throws, failing every write of the batch.
 */
export function runBatch(db: Database.Database, run: (op: WriteOp) => unknown, ops: readonly WriteOp[]): Outcome[] {
  const outcomes: Outcome[] = []
  db.transaction(() => {
    for (const op of ops) {
      try {
        outcomes.push({ ok: true, value: run(op) })
      } catch (error) {
        outcomes.push({ ok: false, error: asWriteError(error) })
      }
    }
  }).immediate()
  return outcomes
}

export function asWriteError(error: unknown): WriteError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error) }
  const code = (error as { code?: unknown }).code
  return { name: error.name, message: error.message, ...(typeof code === 'string' && { code }) }
}

/** The error a caller sees: its message and SQLite's code, whichever thread it came from. */
export function toError(error: WriteError): Error {
  const made = error.name === 'TypeError' ? new TypeError(error.message) : new Error(error.message)
  if (error.code !== undefined) Object.assign(made, { code: error.code })
  if (error.name !== 'TypeError' && error.name !== 'Error') made.name = error.name
  return made
}
