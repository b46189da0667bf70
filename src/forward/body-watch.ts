/**
 * Request bodies being received, watched by one sweep for all of them: a body that pauses longer than
 * `server.body_timeout`, or that arrives slower than `server.body_min_rate` over the last `body_timeout` (a
 * sliding window: a fast start buys no slow rest), is refused with 408 (slow bodies held the upstream's
 * connections). Time the gateway itself holds the body back (the upstream not reading, or no pool connection
 * free yet) is not the client's and does not count.
 */
import { performance } from 'node:perf_hooks'
import type { Readable } from 'node:stream'
import { RequestTimeout } from '../errors/oauth-errors.js'
import type { BodyMemory } from './body-memory.js'

export interface BodyPolicy {
  /** Bodies up to this many bytes are read whole before an upstream connection is taken (0: never). */
  readonly bufferSize: number
  readonly idleMs: number
  /** Bytes per second over the last `idleMs` of reading (0: no minimum). */
  readonly minRate: number
  /** `server.body_streams_per_address`: bodies one client address may stream to upstreams at once. */
  readonly streamsPerAddress: number
  /** `forward.trust_forwarded_headers`: the client's address is the last `X-Forwarded-For` entry. */
  readonly trustForwarded: boolean
  /** `server.body_memory`: the bytes bodies read into memory may hold in the process (one for every runtime). */
  readonly memory: BodyMemory
}

/** How often the sweep runs while some body is being received. */
const SWEEP_MS = 250

export class WatchedBody {
  private bytes = 0
  private lastAt = performance.now()
  /** The sliding window of the rate: bytes and reading time per sweep, oldest first (held time left out). */
  private readonly windowBytes: number[] = []
  private readonly windowMs: number[] = []
  private windowTotalMs = 0
  private windowTotalBytes = 0
  private bytesAtSweep = 0

  constructor(private readonly policy: BodyPolicy, private readonly source: Readable, private readonly onTimeout: (error: RequestTimeout) => void) {}

  /** Count a chunk received. */
  seen(bytes: number): void {
    this.bytes += bytes
    this.lastAt = performance.now()
  }

  expire(why: string): void {
    this.onTimeout(new RequestTimeout(why))
  }

  /** The body has ended, failed or been handed on: no longer watched. */
  stop(): void {
    watched.delete(this)
  }

  /** Why the body is overdue at `now`, or undefined. */
  overdue(now: number, sinceSweep: number): string | undefined {
    const arrived = this.bytes - this.bytesAtSweep
    this.bytesAtSweep = this.bytes
    // Paused by a pipe whose reader is not reading: the gateway's doing, not in the window.
    if (this.source.readableFlowing === false) {
      this.lastAt = now
      return undefined
    }
    const { idleMs, minRate } = this.policy
    if (now - this.lastAt > idleMs) return `no body data for ${Math.round(now - this.lastAt)} ms`
    if (minRate === 0) return undefined
    this.windowBytes.push(arrived)
    this.windowMs.push(sinceSweep)
    this.windowTotalBytes += arrived
    this.windowTotalMs += sinceSweep
    // The window is full once it spans idleMs of reading; then its oldest sweeps leave it.
    if (this.windowTotalMs < idleMs) return undefined
    while (this.windowTotalMs - this.windowMs[0]! >= idleMs) {
      this.windowTotalMs -= this.windowMs.shift()!
      this.windowTotalBytes -= this.windowBytes.shift()!
    }
    const rate = (this.windowTotalBytes * 1000) / this.windowTotalMs
    return rate < minRate ? `body arriving at ${Math.round(rate)} bytes/s over the last ${Math.round(this.windowTotalMs)} ms` : undefined
  }
}

const watched = new Set<WatchedBody>()
let sweeper: NodeJS.Timeout | undefined
let lastSweep = 0

function sweep(): void {
  const now = performance.now()
  const since = now - lastSweep
  lastSweep = now
  for (const body of watched) {
    const why = body.overdue(now, since)
    if (why === undefined) continue
    watched.delete(body)
    body.expire(why)
  }
  if (watched.size === 0) {
    clearInterval(sweeper)
    sweeper = undefined
  }
}

/** Starts watching the body `source` delivers; `onTimeout` is called at most once, and not after `stop()`. */
export function watchBody(policy: BodyPolicy, source: Readable, onTimeout: (error: RequestTimeout) => void): WatchedBody {
  const body = new WatchedBody(policy, source, onTimeout)
  watched.add(body)
  if (sweeper === undefined) {
    lastSweep = performance.now()
    sweeper = setInterval(sweep, SWEEP_MS).unref()
  }
  return body
}
