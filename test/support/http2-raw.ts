/**
 * HTTP/2 frames written by hand over node:net, for what node's own client will not send: floods, header blocks
 * that never end, HPACK that expands. Frames as RFC 9113 §4.1 lays them out (length 24 bits, type, flags, a
 * reserved bit and the stream id in 31), header blocks in HPACK (RFC 7541) without Huffman coding.
 */
import net from 'node:net'

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')

/** Frame types (RFC 9113 §6). */
export const FrameType = {
  DATA: 0x0, HEADERS: 0x1, PRIORITY: 0x2, RST_STREAM: 0x3, SETTINGS: 0x4, PUSH_PROMISE: 0x5, PING: 0x6, GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8, CONTINUATION: 0x9,
} as const

/** Frame flags (RFC 9113 §6). */
export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const

/** Error codes (RFC 9113 §7). */
export const ErrorCode = {
  NO_ERROR: 0x0, PROTOCOL_ERROR: 0x1, INTERNAL_ERROR: 0x2, FLOW_CONTROL_ERROR: 0x3, SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5, FRAME_SIZE_ERROR: 0x6, REFUSED_STREAM: 0x7, CANCEL: 0x8, COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa, ENHANCE_YOUR_CALM: 0xb, INADEQUATE_SECURITY: 0xc, HTTP_1_1_REQUIRED: 0xd,
} as const

/** SETTINGS parameters (RFC 9113 §6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1, ENABLE_PUSH: 0x2, MAX_CONCURRENT_STREAMS: 0x3, INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5, MAX_HEADER_LIST_SIZE: 0x6,
} as const

/** One frame: the 9-byte header (RFC 9113 §4.1) and its payload. */
export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(9)
  header.writeUIntBE(payload.length, 0, 3)
  header.writeUInt8(type, 3)
  header.writeUInt8(flags, 4)
  header.writeUInt32BE(streamId & 0x7fffffff, 5)
  return Buffer.concat([header, payload])
}

/** SETTINGS (RFC 9113 §6.5): `[identifier, value]` pairs, or an acknowledgement. */
export function settingsFrame(entries: ReadonlyArray<readonly [number, number]> = [], ack = false): Buffer {
  const payload = Buffer.alloc(ack ? 0 : entries.length * 6)
  if (!ack) entries.forEach(([id, value], i) => { payload.writeUInt16BE(id, i * 6); payload.writeUInt32BE(value, i * 6 + 2) })
  return frame(FrameType.SETTINGS, ack ? Flag.ACK : 0, 0, payload)
}

/** PING (RFC 9113 §6.7) with 8 bytes of opaque data. */
export function pingFrame(data: Buffer = Buffer.alloc(8), ack = false): Buffer {
  return frame(FrameType.PING, ack ? Flag.ACK : 0, 0, data.subarray(0, 8))
}

/** RST_STREAM (RFC 9113 §6.4). */
export function rstStreamFrame(streamId: number, code: number): Buffer {
  const payload = Buffer.alloc(4)
  payload.writeUInt32BE(code)
  return frame(FrameType.RST_STREAM, 0, streamId, payload)
}

/** WINDOW_UPDATE (RFC 9113 §6.9); stream 0 for the connection's window. */
export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  const payload = Buffer.alloc(4)
  payload.writeUInt32BE(increment & 0x7fffffff)
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, payload)
}

/** HEADERS (RFC 9113 §6.2) carrying `block`, a header block fragment. */
export function headersFrame(streamId: number, block: Buffer, options: { endStream?: boolean; endHeaders?: boolean } = {}): Buffer {
  const flags = (options.endStream ?? true ? Flag.END_STREAM : 0) | (options.endHeaders ?? true ? Flag.END_HEADERS : 0)
  return frame(FrameType.HEADERS, flags, streamId, block)
}

/** CONTINUATION (RFC 9113 §6.10). */
export function continuationFrame(streamId: number, block: Buffer, endHeaders = false): Buffer {
  return frame(FrameType.CONTINUATION, endHeaders ? Flag.END_HEADERS : 0, streamId, block)
}

/** DATA (RFC 9113 §6.1). */
export function dataFrame(streamId: number, data: Buffer, endStream = false): Buffer {
  return frame(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, data)
}

/** An HPACK integer (RFC 7541 §5.1) with an N-bit prefix, `pattern` in the first byte's high bits. */
export function hpackInteger(value: number, prefixBits: number, pattern: number): Buffer {
  const max = (1 << prefixBits) - 1
  if (value < max) return Buffer.from([pattern | value])
  const bytes = [pattern | max]
  let rest = value - max
  while (rest >= 128) { bytes.push((rest % 128) + 128); rest = Math.floor(rest / 128) }
  bytes.push(rest)
  return Buffer.from(bytes)
}

/** An HPACK string literal (RFC 7541 §5.2), not Huffman-coded. */
function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text, 'latin1')
  return Buffer.concat([hpackInteger(bytes.length, 7, 0x00), bytes])
}

/** A literal header field without indexing, new name (RFC 7541 §6.2.2). */
export function literal(name: string, value: string): Buffer {
  return Buffer.concat([Buffer.from([0x00]), hpackString(name), hpackString(value)])
}

/** A literal header field with incremental indexing, new name (RFC 7541 §6.2.1): it enters the dynamic table. */
export function literalIndexed(name: string, value: string): Buffer {
  return Buffer.concat([Buffer.from([0x40]), hpackString(name), hpackString(value)])
}

/** An indexed header field (RFC 7541 §6.1); 62 is the newest dynamic table entry (§2.3.3). */
export function indexed(index: number): Buffer {
  return hpackInteger(index, 7, 0x80)
}

/** A header block of literal fields without indexing, in order (pseudo-headers first, RFC 9113 §8.3). */
export function headerBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  return Buffer.concat(fields.map(([name, value]) => literal(name, value)))
}

/** The pseudo-headers of a request over cleartext (RFC 9113 §8.3.1), then `extra`. */
export function requestFields(path: string, extra: ReadonlyArray<readonly [string, string]> = [], method = 'GET'): Array<readonly [string, string]> {
  return [[':method', method], [':scheme', 'http'], [':authority', 'gateway.test'], [':path', path], ...extra]
}

export interface Frame {
  type: number
  flags: number
  streamId: number
  payload: Buffer
}

export interface GoAway {
  lastStreamId: number
  errorCode: number
}

/**
 * A client connection speaking raw frames. It sends the preface and an empty SETTINGS at once, and (unless
 * `ackSettings` is false) acknowledges the server's SETTINGS (RFC 9113 §6.5.3) when read. With `read: false`
 * nothing is read from the socket (the server's writes pile up in the kernel's buffers) until `resume()`.
 */
export class RawH2 {
  readonly frames: Frame[] = []
  /** Resolves when the socket is closed, by either side; `error` is the socket's error, if any (e.g. ECONNRESET). */
  readonly closed: Promise<{ error?: Error }>
  isClosed = false
  private buffered: Buffer = Buffer.alloc(0)
  private pings = 0
  private readonly waiters = new Set<() => void>()

  private constructor(readonly socket: net.Socket, private readonly ackSettings: boolean) {
    this.closed = new Promise((resolve) => {
      let error: Error | undefined
      socket.on('error', (e) => { error = e })
      socket.on('close', () => {
        this.isClosed = true
        resolve(error === undefined ? {} : { error })
        this.wake()
      })
    })
    socket.on('data', (chunk: Buffer) => this.parse(chunk))
  }

  static connect(port: number, options: { read?: boolean; ackSettings?: boolean; settings?: ReadonlyArray<readonly [number, number]> } = {}): Promise<RawH2> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1')
      const connection = new RawH2(socket, options.ackSettings ?? true)
      if (options.read === false) socket.pause()
      socket.once('error', reject)
      socket.once('connect', () => {
        socket.removeListener('error', reject)
        socket.write(Buffer.concat([PREFACE, settingsFrame(options.settings ?? [])]))
        resolve(connection)
      })
    })
  }

  /** Writes bytes, resolving once they are handed to the kernel (or the socket failed). */
  write(bytes: Buffer): Promise<void> {
    return new Promise((resolve) => {
      if (this.socket.destroyed) { resolve(); return }
      this.socket.write(bytes, () => resolve())
    })
  }

  /**
   * Sends a PING and waits for its acknowledgement (RFC 9113 §6.7): everything written before it has then been
   * processed by the server, our SETTINGS acknowledgement included. False if none came within `timeoutMs`.
   */
  async ping(timeoutMs = 2000): Promise<boolean> {
    const data = Buffer.from(`p${String(++this.pings).padStart(7, '0')}`)
    await this.write(pingFrame(data))
    const ack = await this.waitFor((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0 && f.payload.equals(data), timeoutMs)
    return ack !== undefined
  }

  /** Starts reading what the server sent (after `read: false`). */
  resume(): void {
    this.socket.resume()
  }

  /** The first frame that matches, waiting up to `timeoutMs`; undefined if none came (or the socket closed first). */
  async waitFor(match: (frame: Frame) => boolean, timeoutMs: number): Promise<Frame | undefined> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = this.frames.find(match)
      if (found || this.isClosed || Date.now() >= deadline) return found
      await new Promise<void>((resolve) => {
        const wake = () => { clearTimeout(timer); this.waiters.delete(wake); resolve() }
        const timer = setTimeout(wake, deadline - Date.now())
        this.waiters.add(wake)
      })
    }
  }

  /** The server's GOAWAY (RFC 9113 §6.8), if one came. */
  goaway(): GoAway | undefined {
    const found = this.frames.find((f) => f.type === FrameType.GOAWAY)
    return found && { lastStreamId: found.payload.readUInt32BE(0) & 0x7fffffff, errorCode: found.payload.readUInt32BE(4) }
  }

  /** The RST_STREAM frames received (RFC 9113 §6.4): stream and error code. */
  resets(): Array<{ streamId: number; errorCode: number }> {
    return this.frames.filter((f) => f.type === FrameType.RST_STREAM).map((f) => ({ streamId: f.streamId, errorCode: f.payload.readUInt32BE(0) }))
  }

  /** How many frames of `type` (with all of `flags`) were received. */
  count(type: number, flags = 0): number {
    return this.frames.filter((f) => f.type === type && (f.flags & flags) === flags).length
  }

  /** Closes the socket at once. */
  destroy(): void {
    this.socket.destroy()
  }

  private parse(chunk: Buffer): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk])
    while (this.buffered.length >= 9) {
      const length = this.buffered.readUIntBE(0, 3)
      if (this.buffered.length < 9 + length) break
      const received: Frame = {
        type: this.buffered.readUInt8(3),
        flags: this.buffered.readUInt8(4),
        streamId: this.buffered.readUInt32BE(5) & 0x7fffffff,
        payload: this.buffered.subarray(9, 9 + length),
      }
      this.buffered = this.buffered.subarray(9 + length)
      this.frames.push(received)
      if (this.ackSettings && received.type === FrameType.SETTINGS && (received.flags & Flag.ACK) === 0 && !this.socket.destroyed) {
        this.socket.write(settingsFrame([], true))
      }
    }
    this.wake()
  }

  private wake(): void {
    for (const wake of [...this.waiters]) wake()
  }
}

/** The server's SETTINGS values (its first non-ACK SETTINGS frame), by identifier. */
export function serverSettings(frames: readonly Frame[]): Map<number, number> {
  const settings = new Map<number, number>()
  const first = frames.find((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) === 0)
  for (let i = 0; first && i + 6 <= first.payload.length; i += 6) settings.set(first.payload.readUInt16BE(i), first.payload.readUInt32BE(i + 2))
  return settings
}
