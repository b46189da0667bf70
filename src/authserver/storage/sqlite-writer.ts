/**
 * The SQLite store's writer thread: a connection of its own to the file, which runs each batch of writes the
 * event loop sends in one IMMEDIATE transaction and answers with their outcomes once committed. The commit's
 * fsync and any wait for another process's lock (configureConnection) happen here, not on the event loop that
 * serves requests (sqlite-commit.ts).
 */
import { parentPort, workerData } from 'node:worker_threads'
import Database from 'better-sqlite3'
import { asWriteError, configureConnection, prepareWrites, runBatch, type Outcome, type WriteOp } from './sqlite-writes.js'

export interface WriterData {
  readonly path: string
}

/** A batch to run, or the last message: close the connection (it checkpoints the WAL if it is the last one). */
export type WriterRequest = { readonly batch: number; readonly ops: readonly WriteOp[] } | { readonly close: true }
/** The outcome of each write, or the failure of the whole batch (its transaction did not commit). */
export type WriterAnswer = { readonly batch: number; readonly outcomes: readonly Outcome[] }
  | { readonly batch: number; readonly failed: ReturnType<typeof asWriteError> }
  | { readonly closed: true }

if (parentPort !== null) {
  const port = parentPort
  const { path } = workerData as WriterData
  const db = new Database(path)
  configureConnection(db)
  const run = prepareWrites(db)
  port.on('message', (request: WriterRequest) => {
    if ('close' in request) {
      db.close()
      port.postMessage({ closed: true } satisfies WriterAnswer)
      return
    }
    let answer: WriterAnswer
    try {
      answer = { batch: request.batch, outcomes: runBatch(db, run, request.ops) }
    } catch (error) {
      answer = { batch: request.batch, failed: asWriteError(error) }
    }
    port.postMessage(answer)
  })
}
