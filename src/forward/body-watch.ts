/**
 * Request bodies being received, watched by one sweep for all of them: a body that pauses longer than
 * `server.body_timeout`, or that arrives slower than `server.body_min_rate` once that long has passed, is
 * refused with 408 (slow bodies held the upstream's connections). Time the gateway itself holds
 * the body back (the upstream not reading, or no pool connection free yet) is not the client's and does
 * not count.
 */
import { performance } from 'node:perf_hooks'
import type { Readable } from 'node:stream'
import { RequestTimeout } from '../errors/oauth-errors.js'

export interface BodyPolicy {
  /** Bodies up to this many bytes are read whole before an upstream connection is taken (0: never). */
  readonly bufferSize: number
  readonly idleMs: number
  /** Bytes per second, averaged over the time the gateway was reading (0: no minimum). */
  readonly minRate: number
}

/** How often the sweep runs while some body is being received. */
const SWEEP_MS = 250

export class WatchedBody {
  private bytes = 0
  private readonly startedAt = performance.now()
  private lastAt = this.startedAt
  /** Time the body was held back by the gateway, not the client. */
  private heldMs = 0

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
    // Paused by a pipe whose reader is not reading: the gateway's doing.
    if (this.source.readableFlowing === false) {
      this.heldMs += sinceSweep
      this.lastAt = now
      return undefined
    }
    const { idleMs, minRate } = this.policy
    if (now - this.lastAt > idleMs) return `no body data for ${Math.round(now - this.lastAt)} ms`
    const reading = now - this.startedAt - this.heldMs
    if (minRate > 0 && reading > idleMs && (this.bytes * 1000) / reading < minRate) {
      return `body arriving at ${Math.round((this.bytes * 1000) / reading)} bytes/s`
    }
    return undefined
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
