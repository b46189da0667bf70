/**
 * Where the log goes, and the request line (one per request at `info`, the default) written without pino's
 * per-line work (it cost 13–25 µs of CPU per request over `warn`).
 *
 * - The request line is written here, as bytes into a buffer the output reuses: its fields are known, few,
 *   and none of them is a credential (the path without its query, bounded codes, a request id of safe
 *   characters). No string is made per line (building it as text cost 3–4 µs a request, most of it in
 *   joining and flattening strings). It is the same JSON pino would write for `log.info(entry, msg)`, byte
 *   for byte: test/server/log-output.test.ts compares the two.
 * - Request lines are held until the end of the event-loop turn (setImmediate) and written together: under
 *   load one write carries the lines of every request that finished in that turn. pino's own lines go
 *   through {@link LogOutput.write}, which writes out the held request lines first, so the output keeps
 *   the order in which the lines were made. A line is never split between two writes.
 */
import { randomFillSync } from 'node:crypto'
import { writeSync } from 'node:fs'
import pino from 'pino'
import type { FastifyBaseLogger } from 'fastify'

/** Waited on (never woken) to pause while a full pipe drains. */
const PAUSE = new Int32Array(new SharedArrayBuffer(4))

/** Held request lines, in bytes: a line that would not fit writes out what is held first. */
export const HELD_BYTES = 64 * 1024

export class LogOutput implements pino.DestinationStream {
  /** The held lines are `bytes[0, used)`. */
  readonly bytes = Buffer.allocUnsafeSlow(HELD_BYTES)
  private used = 0
  private scheduled = false

  /**
   * @param atExit write out what is held when the process exits (the process's own stdout; not a test's stream)
   * @param fd the file descriptor `out` writes to, unbuffered and synchronously (pino.destination({ dest, sync: true })):
   *   held lines are then written to it as they are, bytes, without being made a string for `out` first (0.3–1 µs a
   *   write). `out` writes pino's own lines, and whatever the descriptor refuses.
   */
  constructor(private readonly out: pino.DestinationStream, private readonly atExit = false, private readonly fd?: number) {
    if (atExit) process.once('exit', this.flushSync)
  }

  /** The gateway closes: everything held is written, and the exit hook let go. */
  close(): void {
    this.flushSync()
    if (this.atExit) process.removeListener('exit', this.flushSync)
  }

  /** pino's lines: after the request lines made before them. */
  write(line: string): void {
    if (this.used !== 0) this.flush()
    this.out.write(line)
  }

  /**
   * Room for a request line of at most `size` bytes (at most {@link HELD_BYTES}) in {@link bytes}: the offset
   * to write it at. What is held is written out first when the line would not fit.
   */
  reserve(size: number): number {
    if (this.used + size > HELD_BYTES) this.flush()
    return this.used
  }

  /** The line written into {@link bytes} up to `end`: it goes out at the end of this event-loop turn, with the others of the turn. */
  commit(end: number): void {
    this.used = end
    if (!this.scheduled) {
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
    if (this.used !== 0) {
      const length = this.used
      this.used = 0
      if (this.fd === undefined) this.out.write(this.bytes.toString('utf8', 0, length))
      else this.writeHeld(length)
    }
    if (done === undefined) return
    const out = this.out as { flush?: (done: (error?: Error) => void) => void }
    if (typeof out.flush === 'function') out.flush(done)
    else done()
  }

  /**
   * `bytes[0, length)` to the descriptor, whole: a full non-blocking pipe (EAGAIN) is waited for, 10 ms at a
   * time, as pino's destination waits in its synchronous mode (so nothing is left pending behind pino's own
   * next line). Any other error is left to `out`, given what was not written.
   */
  private writeHeld(length: number): void {
    let at = 0
    while (at < length) {
      try {
        at += writeSync(this.fd!, this.bytes, at, length - at)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        if (code === 'EAGAIN' || code === 'EBUSY') {
          Atomics.wait(PAUSE, 0, 0, 10)
          continue
        }
        this.out.write(this.bytes.toString('utf8', at, length))
        return
      }
    }
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
  /** The request's id; one of our own (a random UUID) when undefined. */
  reqId: string | undefined
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
  /** `h2` for a request over HTTP/2 (server.http2); absent for HTTP/1.1. */
  protocol?: string | undefined
  /** A gRPC call's method (its path, `/package.Service/Method`) and the gRPC status it ended with. */
  grpc_method?: string | undefined
  grpc_status?: number | undefined
}

const ascii = (text: string): Uint8Array => Buffer.from(text, 'latin1')
const LEVEL_TIME = ascii('{"level":30,"time":')
/** `,"name":` for each field after the request id. */
const FIELDS = ['route', 'method', 'path', 'status', 'decision', 'error', 'reason', 'ms', 'trace_id', 'span_id', 'protocol', 'grpc_method', 'grpc_status'] as const
const FIELD = Object.fromEntries(FIELDS.map((name) => [name, ascii(`,"${name}":`)])) as Record<typeof FIELDS[number], Uint8Array>
const NULL = ascii('null')
const MESSAGES = { 'request': ascii(',"msg":"request"}\n'), 'request denied': ascii(',"msg":"request denied"}\n') }
/** The constant bytes of a line with every field, and the most a number takes (`-1.2345678901234567e-300`). */
const FIXED = LEVEL_TIME.length + FIELDS.reduce((sum, name) => sum + FIELD[name].length, 0) + MESSAGES['request denied'].length + 4 * 24
/** The most bytes a string of `text.length` UTF-16 units takes in JSON: `\u001f` for each, and the quotes. */
const most = (text: string | undefined): number => (text === undefined ? 0 : 6 * text.length + 2)

/** Writes request lines in pino's format, with the logger's bindings (`pid`, `hostname`), to its output. */
export class RequestLog {
  /** `,"pid":…,"hostname":"…","reqId":`: pino's own rendering of the root logger's bindings, and the first field's name. */
  private readonly bindings: Uint8Array
  private readonly ids = new RequestIds()

  constructor(logger: FastifyBaseLogger, private readonly output: LogOutput) {
    const bindings = String((logger as unknown as Record<symbol, unknown>)[pino.symbols.chindingsSym] ?? '')
    this.bindings = Buffer.from(`${bindings},"reqId":`, 'utf8')
  }

  write(entry: RequestLine, msg: 'request' | 'request denied'): void {
    const size = FIXED + this.bindings.length + (entry.reqId === undefined ? 38 : most(entry.reqId)) + most(entry.route) + most(entry.method)
      + most(entry.path) + most(entry.decision) + most(entry.error) + most(entry.reason) + most(entry.trace_id) + most(entry.span_id)
      + most(entry.protocol) + most(entry.grpc_method)
    if (size <= HELD_BYTES) {
      const output = this.output
      output.commit(this.format(output.bytes, output.reserve(size), entry, msg))
    } else {
      // Longer than all that may be held (a reason or route id of many kilobytes): written at once, after what is held.
      const own = Buffer.allocUnsafe(size)
      this.output.write(own.toString('utf8', 0, this.format(own, 0, entry, msg)))
    }
  }

  private format(bytes: Buffer, at: number, entry: RequestLine, msg: 'request' | 'request denied'): number {
    bytes.set(LEVEL_TIME, at)
    at = writeNumber(bytes, at + LEVEL_TIME.length, Date.now())
    bytes.set(this.bindings, at)
    at += this.bindings.length
    at = entry.reqId === undefined ? this.ids.write(bytes, at) : writeString(bytes, at, entry.reqId)
    if (entry.route !== undefined) at = writeString(bytes, put(bytes, at, FIELD.route), entry.route)
    if (entry.method !== undefined) at = writeString(bytes, put(bytes, at, FIELD.method), entry.method)
    at = writeString(bytes, put(bytes, at, FIELD.path), entry.path)
    at = writeNumber(bytes, put(bytes, at, FIELD.status), entry.status)
    at = writeString(bytes, put(bytes, at, FIELD.decision), entry.decision)
    if (entry.error !== undefined) at = writeString(bytes, put(bytes, at, FIELD.error), entry.error)
    if (entry.reason !== undefined) at = writeString(bytes, put(bytes, at, FIELD.reason), entry.reason)
    at = writeNumber(bytes, put(bytes, at, FIELD.ms), entry.ms)
    if (entry.trace_id !== undefined && entry.span_id !== undefined) {
      at = writeString(bytes, put(bytes, at, FIELD.trace_id), entry.trace_id)
      at = writeString(bytes, put(bytes, at, FIELD.span_id), entry.span_id)
    }
    if (entry.protocol !== undefined) {
      at = writeString(bytes, put(bytes, at, FIELD.protocol), entry.protocol)
      if (entry.grpc_method !== undefined) at = writeString(bytes, put(bytes, at, FIELD.grpc_method), entry.grpc_method)
      if (entry.grpc_status !== undefined) at = writeNumber(bytes, put(bytes, at, FIELD.grpc_status), entry.grpc_status)
    }
    return put(bytes, at, MESSAGES[msg])
  }
}

function put(bytes: Buffer, at: number, constant: Uint8Array): number {
  bytes.set(constant, at)
  return at + constant.length
}

/**
 * `text` as a JSON string. Printable ASCII but `"` and `\` (a path, a route id, a code nearly always) is
 * copied as it is; anything else as JSON.stringify writes it (pino's own escaping).
 */
function writeString(bytes: Buffer, at: number, text: string): number {
  const length = text.length
  bytes[at] = 0x22
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return at + bytes.write(JSON.stringify(text), at, 'utf8')
    bytes[at + 1 + i] = c
  }
  bytes[at + 1 + length] = 0x22
  return at + length + 2
}

/**
 * `n` as JSON writes it (`String(n)`; `null` when not finite). A duration in hundredths of a millisecond
 * (`ms`) is written digit by digit, without making its string.
 */
function writeNumber(bytes: Buffer, at: number, n: number): number {
  if (!Number.isFinite(n)) return put(bytes, at, NULL)
  if (n >= 0 && n < 1e9 && !Number.isInteger(n)) {
    const hundredths = Math.round(n * 100)
    if (hundredths / 100 === n) {
      at = writeDigits(bytes, at, Math.floor(hundredths / 100))
      const fraction = hundredths % 100
      bytes[at] = 0x2e
      bytes[at + 1] = 0x30 + Math.floor(fraction / 10)
      if (fraction % 10 === 0) return at + 2
      bytes[at + 2] = 0x30 + (fraction % 10)
      return at + 3
    }
  }
  // Digits, `.`, `e`, `+` and `-` only.
  const text = String(n)
  for (let i = 0; i < text.length; i++) bytes[at + i] = text.charCodeAt(i)
  return at + text.length
}

/** A whole number from 0 to 1e9, in decimal. */
function writeDigits(bytes: Buffer, at: number, whole: number): number {
  let digits = 1
  for (let rest = whole; rest >= 10; rest = Math.floor(rest / 10)) digits++
  for (let i = digits - 1; i >= 0; i--) {
    bytes[at + i] = 0x30 + (whole % 10)
    whole = Math.floor(whole / 10)
  }
  return at + digits
}

const HEX = ascii('0123456789abcdef')

/** Random (version 4) UUIDs, as `crypto.randomUUID` makes them, written straight into the line from a pool of random bytes. */
class RequestIds {
  private readonly pool = Buffer.allocUnsafeSlow(16 * 256)
  private next = this.pool.length

  /** A new id, quoted, at `at`; returns where it ends. */
  write(bytes: Buffer, at: number): number {
    if (this.next === this.pool.length) {
      randomFillSync(this.pool)
      this.next = 0
    }
    const pool = this.pool
    const from = this.next
    this.next += 16
    // RFC 9562 §5.4: the version (4) in the high nibble of byte 6, the variant (10) in the top bits of byte 8.
    pool[from + 6] = (pool[from + 6]! & 0x0f) | 0x40
    pool[from + 8] = (pool[from + 8]! & 0x3f) | 0x80
    bytes[at++] = 0x22
    for (let i = 0; i < 16; i++) {
      if (i === 4 || i === 6 || i === 8 || i === 10) bytes[at++] = 0x2d
      const byte = pool[from + i]!
      bytes[at] = HEX[byte >> 4]!
      bytes[at + 1] = HEX[byte & 0x0f]!
      at += 2
    }
    bytes[at] = 0x22
    return at + 1
  }
}
