/**
 * Where the log goes, and the request line (one per request at `info`, the default) written without pino's
 * per-line work (issue 24: it cost 13–25 µs of CPU per request over `warn`).
 *
 * - The request line is built here, as text: its fields are known, few, and none of them is a credential
 *   (the path without its query, bounded codes, a request id of safe characters). The same JSON pino would
 *   write for `log.info(entry, msg)`, field for field: test/log-output.test.ts compares the two.
 * - Request lines are held until the end of the event-loop turn (setImmediate) and written together: under
 *   load one write carries the lines of every request that finished in that turn. pino's own lines go
 *   through {@link LogOutput.write}, which writes out the held request lines first, so the output keeps
 *   the order in which the lines were made.
 */
import pino from 'pino'
import type { FastifyBaseLogger } from 'fastify'

/** Held request lines are written once they reach this many characters, whatever the turn. */
const MAX_HELD = 64 * 1024

export class LogOutput implements pino.DestinationStream {
  private held = ''
  private scheduled = false

  /** @param atExit write out what is held when the process exits (the process's own stdout; not a test's stream) */
  constructor(private readonly out: pino.DestinationStream, private readonly atExit = false) {
    if (atExit) process.once('exit', this.flushSync)
  }

  /** The gateway closes: everything held is written, and the exit hook let go. */
  close(): void {
    this.flushSync()
    if (this.atExit) process.removeListener('exit', this.flushSync)
  }

  /** pino's lines: after the request lines made before them. */
  write(line: string): void {
    if (this.held !== '') this.flush()
    this.out.write(line)
  }

  /** A request line: written at the end of this event-loop turn, with the others of the turn. */
  hold(line: string): void {
    this.held += line
    if (this.held.length >= MAX_HELD) this.flush()
    else if (!this.scheduled) {
      this.scheduled = true
      setImmediate(this.endOfTurn)
    }
  }

  private readonly endOfTurn = (): void => {
    this.scheduled = false
    this.flush()
  }

  /** Writes out the request lines held (at close and at exit too); `done` as pino's `logger.flush(done)` expects. */
  flush(done?: (error?: Error) => void): void {
    if (this.held !== '') {
      const text = this.held
      this.held = ''
      this.out.write(text)
    }
    if (done === undefined) return
    const out = this.out as { flush?: (done: (error?: Error) => void) => void }
    if (typeof out.flush === 'function') out.flush(done)
    else done()
  }

  /**
   * At exit: the held lines, then whatever the output itself holds, written before the process goes (pino's
   * own exit flush of its stdout stream may already have run).
   */
  readonly flushSync = (): void => {
    try {
      this.flush()
      const out = this.out as { flushSync?: () => void }
      out.flushSync?.()
    } catch {
      // Not open yet, or already closed: there is nothing left to write to.
    }
  }
}

/** The fields of one request's line; `undefined` ones are left out, as pino leaves them out. */
export interface RequestLine {
  reqId: string
  route: string | undefined
  method: string | undefined
  path: string
  status: number
  decision: string
  error?: string | undefined
  reason?: string | undefined
  ms: number
  trace_id?: string | undefined
  span_id?: string | undefined
}

const INFO = 30

/** Writes request lines in pino's format, with the logger's bindings (`pid`, `hostname`), to its output. */
export class RequestLog {
  /** `,"pid":…,"hostname":"…"`: pino's own rendering of the root logger's bindings. */
  private readonly bindings: string

  constructor(logger: FastifyBaseLogger, private readonly output: LogOutput) {
    this.bindings = String((logger as unknown as Record<symbol, unknown>)[pino.symbols.chindingsSym] ?? '')
  }

  write(entry: RequestLine, msg: 'request' | 'request denied'): void {
    let line = `{"level":${INFO},"time":${Date.now()}${this.bindings},"reqId":${quoted(entry.reqId)}`
    if (entry.route !== undefined) line += `,"route":${quoted(entry.route)}`
    if (entry.method !== undefined) line += `,"method":${quoted(entry.method)}`
    line += `,"path":${quoted(entry.path)},"status":${entry.status},"decision":${quoted(entry.decision)}`
    if (entry.error !== undefined) line += `,"error":${quoted(entry.error)}`
    if (entry.reason !== undefined) line += `,"reason":${quoted(entry.reason)}`
    line += `,"ms":${Number.isFinite(entry.ms) ? entry.ms : null}`
    if (entry.trace_id !== undefined && entry.span_id !== undefined) line += `,"trace_id":${quoted(entry.trace_id)},"span_id":${quoted(entry.span_id)}`
    this.output.hold(`${line},"msg":"${msg}"}\n`)
  }
}

/** Printable ASCII but `"` and `\`: needs no escape in JSON (a path, a route id, a code nearly always). */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/

/** `text` as a JSON string; JSON.stringify costs twice the test on the plain text of nearly every line. */
function quoted(text: string): string {
  return PLAIN.test(text) ? `"${text}"` : JSON.stringify(text)
}
