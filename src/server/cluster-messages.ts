/**
 * What the primary and its workers say to each other under `server.workers`, over node:cluster's
 * IPC channel: revocations, reloads and readiness; on the request path only what must be counted once for all
 * the workers (DPoP proof marks, rate limits with the memory store). Connections are spread by the OS
 * (SCHED_NONE), not passed through the primary.
 */
import cluster from 'node:cluster'
import type { Broadcast, RevocationMessage } from '../authserver/broadcast.js'
import type { SharedOnce } from '../dpop/replay.js'

export type ClusterMessage =
  /** worker → primary: listening, ready for traffic. */
  | { readonly portcullis: 'started' }
  /** worker → primary → every other worker: a revocation, or `keys` (the signing keys in the store changed). */
  | { readonly portcullis: 'broadcast'; readonly message: RevocationMessage }
  /** primary → worker: re-read the config file (SIGHUP to the primary). */
  | { readonly portcullis: 'reload' }
  /** primary → worker, and the answer: why the worker cannot serve (empty when it can). */
  | { readonly portcullis: 'readiness?'; readonly id: number }
  | { readonly portcullis: 'readiness'; readonly id: number; readonly problems: readonly string[] }
  /** worker → primary, and the answer: whether `key` is seen for the first time (DPoP proofs, RFC 9449 §11.1). */
  | { readonly portcullis: 'first-use?'; readonly id: number; readonly key: string; readonly ttlSeconds: number }
  | { readonly portcullis: 'first-use'; readonly id: number; readonly first: boolean }
  /**
   * worker → primary, and the answer: the rate-limit takes of the requests of one event-loop turn, each request's
   * all or nothing (ratelimit/shared.ts; server/cluster-rates.ts). A take: bucket, key, emission ms, tolerance ms,
   * max keys; an outcome: allowed (1 or 0), remaining, retry after ms, reset ms.
   */
  | { readonly portcullis: 'rate?'; readonly batch: ReadonlyArray<{ readonly id: number; readonly takes: ReadonlyArray<RateTake> }> }
  | { readonly portcullis: 'rate'; readonly batch: ReadonlyArray<{ readonly id: number; readonly outcomes: ReadonlyArray<RateOutcome> }> }
  /**
   * worker → primary at start, and the answer: the DPoP nonce key every worker uses when `dpop.nonce_secret` is
   * not set (made once by the primary, so that the workers accept each other's nonces; base64url).
   */
  | { readonly portcullis: 'nonce-key?' }
  | { readonly portcullis: 'nonce-key'; readonly key: string }

export type RateTake = readonly [bucket: string, key: string, emissionMs: number, toleranceMs: number, maxKeys: number]
export type RateOutcome = readonly [allowed: 0 | 1, remaining: number, retryAfterMs: number, resetMs: number]

export function isClusterMessage(value: unknown): value is ClusterMessage {
  return typeof value === 'object' && value !== null && typeof (value as { portcullis?: unknown }).portcullis === 'string'
}

/** To the primary; false when the channel is gone (the primary exited): the caller carries on alone. */
export function toPrimary(message: ClusterMessage): boolean {
  if (!cluster.isWorker || !process.connected) return false
  process.send!(message)
  return true
}

/**
 * Revocations between the workers of one primary: what the Redis channel is between instances
 * (broadcast.ts), over IPC. IPC loses nothing while both ends live; a worker that starts later loads the
 * deny-list from the store, so there is nothing to resynchronise.
 */
export function ipcBroadcast(): Broadcast {
  let listener: ((message: unknown) => void) | undefined
  return {
    publish: async (message) => { toPrimary({ portcullis: 'broadcast', message }) },
    subscribe(onMessage) {
      listener = (message: unknown) => {
        if (isClusterMessage(message) && message.portcullis === 'broadcast') onMessage(message.message)
      }
      process.on('message', listener)
    },
    close: async () => { if (listener) process.off('message', listener) },
  }
}

/** How long a worker waits for the primary's answer before the proof counts as uncheckable (503). */
const FIRST_USE_TIMEOUT_MS = 1000

/**
 * Single use across the workers of one machine: a DPoP proof accepted by one worker, at the token
 * endpoint or the gateway, is refused by every other. The primary keeps the marks ({@link FirstUseMarks}); a
 * Redis store's own `firstUse` takes precedence, since it spans instances too.
 */
export function ipcFirstUse(): SharedOnce {
  let next = 0
  const waiting = new Map<number, { resolve(first: boolean): void; timer: NodeJS.Timeout }>()
  process.on('message', (message: unknown) => {
    if (!isClusterMessage(message) || message.portcullis !== 'first-use') return
    const pending = waiting.get(message.id)
    if (pending === undefined) return
    waiting.delete(message.id)
    clearTimeout(pending.timer)
    pending.resolve(message.first)
  })
  return {
    firstUse: (key, ttlSeconds) => new Promise((resolve, reject) => {
      const id = ++next
      const timer = setTimeout(() => { waiting.delete(id); reject(new Error('the primary did not answer')) }, FIRST_USE_TIMEOUT_MS)
      waiting.set(id, { resolve, timer })
      if (!toPrimary({ portcullis: 'first-use?', id, key, ttlSeconds })) {
        waiting.delete(id)
        clearTimeout(timer)
        reject(new Error('no primary'))
      }
    }),
  }
}

/** The primary's marks for {@link ipcFirstUse}: bounded; full of live marks, it refuses (fails closed). */
export class FirstUseMarks {
  private readonly marks = new Map<string, number>()
  constructor(private readonly max = 1_000_000, private readonly now: () => number = Date.now) {}

  firstUse(key: string, ttlSeconds: number): boolean {
    const now = this.now()
    const until = this.marks.get(key)
    if (until !== undefined && until > now) return false
    if (this.marks.size >= this.max) {
      for (const [mark, expires] of this.marks) if (expires <= now) this.marks.delete(mark)
      if (this.marks.size >= this.max) return false
    }
    this.marks.set(key, now + ttlSeconds * 1000)
    return true
  }
}

/** How long a starting worker waits for the primary's nonce key before it makes one of its own (logged). */
const NONCE_KEY_TIMEOUT_MS = 5000

/** The workers' shared DPoP nonce key, asked of the primary; undefined when it does not answer in time. */
export function askNonceKey(): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const done = (key: Buffer | undefined) => {
      clearTimeout(timer)
      process.off('message', listener)
      resolve(key)
    }
    const listener = (message: unknown) => {
      if (isClusterMessage(message) && message.portcullis === 'nonce-key') done(Buffer.from(message.key, 'base64url'))
    }
    const timer = setTimeout(() => done(undefined), NONCE_KEY_TIMEOUT_MS)
    process.on('message', listener)
    if (!toPrimary({ portcullis: 'nonce-key?' })) done(undefined)
  })
}
