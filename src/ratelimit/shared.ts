/**
 * Rate limits counted by another process: under `server.workers` with the memory store, the primary keeps every
 * policy's buckets, so the workers together admit what the YAML says, not one budget each (the brute-force
 * throttles and DPoP proof marks are kept there for the same reason). A worker sends the takes of its requests
 * (batched per event-loop turn: server/cluster-rates.ts); the primary answers each request's takes all or nothing,
 * on its one clock, as the memory store in one process does.
 */
import type { GcraOutcome, GcraParameters } from './gcra.js'
import { MemoryBuckets, takeAll } from './memory.js'

/** One policy's take for one request, as sent: the policy's buckets by name and settings, the key value, the budget. */
export interface SharedTake {
  /** The policy's name and fingerprint: a reload that changes a policy starts it afresh, as in one process. */
  readonly bucket: string
  readonly key: string
  readonly parameters: GcraParameters
  /** `rate_limits.store.max_keys`, for buckets made at the primary. */
  readonly maxKeys: number
}

/** What a worker asks its primary: the takes of one request, all or nothing; rejects when there is no answer. */
export interface SharedBuckets {
  takeAll(takes: readonly SharedTake[]): Promise<GcraOutcome[]>
}

/** A policy's buckets not used for this long are dropped (a reload changed or removed the policy). */
const IDLE_MS = 60 * 60 * 1000

/** The primary's side: every worker's policies' buckets, one set per policy name and fingerprint. */
export class SharedBucketsHost {
  private readonly buckets = new Map<string, { readonly buckets: MemoryBuckets; lastUsed: number }>()

  constructor(private readonly now: () => number = Date.now) {}

  takeAll(takes: readonly SharedTake[]): GcraOutcome[] {
    const now = this.now()
    return takeAll(takes.map((take) => ({ bucket: this.bucketsOf(take, now), key: take.key, parameters: take.parameters })), now)
  }

  /** Policies with buckets now (for tests and metrics). */
  get size(): number {
    return this.buckets.size
  }

  private bucketsOf(take: SharedTake, now: number): MemoryBuckets {
    let held = this.buckets.get(take.bucket)
    if (held === undefined) {
      for (const [name, idle] of this.buckets) if (now - idle.lastUsed > IDLE_MS) this.buckets.delete(name)
      this.buckets.set(take.bucket, held = { buckets: new MemoryBuckets(take.maxKeys), lastUsed: now })
    }
    held.lastUsed = now
    return held.buckets
  }
}
