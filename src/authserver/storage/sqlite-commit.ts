/**
 * Group commit for the SQLite store: the writes asked for during one turn of the event loop run together in
 * one IMMEDIATE transaction, so that concurrent requests share one fsync (`synchronous = FULL`) instead of
 * paying one each. A caller's promise settles only once the transaction has committed: nothing is answered
 * before it is on disk. Writes run in the order they were asked for.
 *
 * Where the compiled writer is there (a build, as `portcullis start` runs) and the file is a file, the
 * transactions run on a thread of their own (sqlite-writer.ts), one batch at a time: while one commits, the
 * event loop goes on serving requests and gathers the next batch. An in-memory database (one connection only)
 * and the TypeScript sources (the test runner, where no compiled writer sits next to this module) commit on
 * the event loop, on the next turn.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import type Database from 'better-sqlite3'
import { runBatch, toError, type Outcome, type WriteOp } from './sqlite-writes.js'
import type { WriterAnswer, WriterData, WriterRequest } from './sqlite-writer.js'

export interface Committer {
  /** Queues the write; settles with its outcome once its batch has committed. */
  write(op: WriteOp): Promise<unknown>
  /** Settles once every write asked for so far has settled. */
  drain(): Promise<void>
  /** Drains, then stops taking writes (and ends the writer thread). */
  close(): Promise<void>
}

interface Pending {
  readonly op: WriteOp
  readonly resolve: (value: unknown) => void
  readonly reject: (error: unknown) => void
}

const WRITER = new URL('./sqlite-writer.js', import.meta.url)

/** Whether the writer thread can be used for this file. */
export function writerThreadFor(path: string): boolean {
  return path !== ':memory:' && existsSync(fileURLToPath(WRITER))
}

function settle(batch: readonly Pending[], outcomes: readonly Outcome[]): void {
  batch.forEach((pending, i) => {
    const outcome = outcomes[i]!
    if (outcome.ok) pending.resolve(outcome.value)
    else pending.reject(toError(outcome.error))
  })
}

const closedError = () => new Error('the SQLite store is closed')

/** What stopped the writer thread, as an Error: SQLite's own errors arrive from the thread as plain objects. */
function stoppedBy(error: unknown): Error {
  if (error instanceof Error) return error
  const code = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : undefined
  return Object.assign(new Error(`the SQLite writer thread stopped: ${code ?? String(error)}`), code !== undefined && { code })
}

/** The batch runs on the event loop, on the turn after the writes were asked for. */
export function inlineCommit(db: Database.Database, run: (op: WriteOp) => unknown): Committer {
  let queue: Pending[] = []
  let flushed: Promise<void> | undefined
  let closed = false
  const flush = () => {
    const batch = queue
    queue = []
    flushed = undefined
    let outcomes: Outcome[]
    try {
      outcomes = runBatch(db, run, batch.map((pending) => pending.op))
    } catch (error) {
      for (const pending of batch) pending.reject(error)
      return
    }
    settle(batch, outcomes)
  }
  const drain = async () => { while (flushed) await flushed }
  return {
    write: (op) => new Promise((resolve, reject) => {
      if (closed) { reject(closedError()); return }
      queue.push({ op, resolve, reject })
      flushed ??= new Promise<void>((done) => setImmediate(() => { flush(); done() }))
    }),
    drain,
    async close() { closed = true; await drain() },
  }
}

/**
 * The batch runs on the writer thread; one batch at a time, and what is asked for meanwhile goes in the next.
 * The thread keeps the process alive only while a batch is out. If it stops (it should not), the writes it
 * held and those waiting fail (a write whose batch was out may or may not have committed), and the next write
 * starts another.
 */
export function threadCommit(path: string): Committer {
  let worker: Worker | undefined
  let queue: Pending[] = []
  let out: { readonly batch: number; readonly pending: readonly Pending[] } | undefined
  let batches = 0
  let scheduled = false
  let closed = false
  let idle: Array<() => void> = []

  const wake = () => {
    if (out !== undefined || queue.length > 0 || scheduled) return
    worker?.unref()
    const waiting = idle
    idle = []
    for (const done of waiting) done()
  }
  const fail = (stopped: Worker, error: Error) => {
    if (worker !== stopped) return
    worker = undefined
    const lost = [...(out?.pending ?? []), ...queue]
    out = undefined
    queue = []
    for (const pending of lost) pending.reject(error)
    wake()
  }
  const start = (): Worker => {
    const started = new Worker(WRITER, { workerData: { path } satisfies WriterData })
    let reason: Error | undefined
    started.on('message', (answer: WriterAnswer) => {
      if ('closed' in answer || out === undefined || answer.batch !== out.batch) return
      const { pending } = out
      out = undefined
      if ('failed' in answer) {
        const error = toError(answer.failed)
        for (const one of pending) one.reject(error)
      } else {
        settle(pending, answer.outcomes)
      }
      send()
    })
    started.on('error', (error: unknown) => { reason = stoppedBy(error) })
    started.on('exit', (code) => fail(started, reason ?? new Error(`the SQLite writer thread stopped (exit code ${code})`)))
    return started
  }
  const send = () => {
    scheduled = false
    if (out !== undefined || queue.length === 0) { wake(); return }
    worker ??= start()
    worker.ref()
    out = { batch: ++batches, pending: queue }
    queue = []
    worker.postMessage({ batch: out.batch, ops: out.pending.map((pending) => pending.op) } satisfies WriterRequest)
  }
  const drain = () => new Promise<void>((done) => {
    idle.push(done)
    wake()
  })

  return {
    write: (op) => new Promise((resolve, reject) => {
      if (closed) { reject(closedError()); return }
      queue.push({ op, resolve, reject })
      // The writes of this turn go together: sent on the next, unless a batch is still out (sent on its answer).
      if (!scheduled && out === undefined) {
        scheduled = true
        setImmediate(send)
      }
    }),
    drain,
    async close() {
      closed = true
      await drain()
      const last = worker
      worker = undefined
      if (last === undefined) return
      last.ref()
      await new Promise<void>((done) => {
        last.on('message', (answer: WriterAnswer) => { if ('closed' in answer) done() })
        last.once('exit', () => done())
        last.postMessage({ close: true } satisfies WriterRequest)
      })
      await last.terminate()
    },
  }
}
