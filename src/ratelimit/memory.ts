/**
 * Rate-limit state in one process: per policy, a Map from key value to its TAT (gcra.ts). A check allocates
 * nothing but what Map.set may; a full map first drops the keys whose bucket has refilled (they are the same
 * as absent), then, if none has, the oldest inserted 1 %: those keys start over with a full bucket, so `max_keys`
 * bounds memory at the price of letting a key evicted early spend its budget again (documented; size it to
 * the keys of one window).
 */
import { gcraAll, type GcraOutcome, type GcraParameters } from './gcra.js'

export class MemoryBuckets {
  private readonly tats = new Map<string, number>()
  constructor(private readonly maxKeys: number) {}

  /** The key's stored TAT; 0 when unknown (a full bucket). */
  tatOf(key: string): number {
    return this.tats.get(key) ?? 0
  }

  /** Stores what an admitted request made the key's TAT. */
  set(key: string, tat: number, now: number): void {
    if (this.tats.size >= this.maxKeys && !this.tats.has(key)) this.makeRoom(now)
    this.tats.set(key, tat)
  }

  get size(): number {
    return this.tats.size
  }

  /** Refilled keys go; if that frees nothing, the oldest 1 %: a scan per hundredth of the map, never per request. */
  private makeRoom(now: number): void {
    for (const [key, tat] of this.tats) if (tat <= now) this.tats.delete(key)
    // Always down to 99 %: the next scan is a hundredth of the map's inserts away, even when the sweep freed
    // only a few (else a trickle of new keys would scan the whole map on every request: found in review).
    let excess = this.tats.size - this.maxKeys + Math.max(1, Math.floor(this.maxKeys / 100))
    for (const key of this.tats.keys()) {
      if (excess-- <= 0) break
      this.tats.delete(key)
    }
  }
}

/** One policy's take for one request: its buckets (by policy), the key value counted, its budget. */
export interface BucketTake {
  readonly bucket: MemoryBuckets
  readonly key: string
  readonly parameters: GcraParameters
}

/** The takes of one request, all or nothing (gcra.ts {@link gcraAll}): stored only when every policy admits. */
export function takeAll(takes: readonly BucketTake[], now: number): GcraOutcome[] {
  const { admitted, outcomes } = gcraAll(takes.map((take) => take.bucket.tatOf(take.key)), now, takes.map((take) => take.parameters))
  if (admitted) for (const [i, take] of takes.entries()) take.bucket.set(take.key, outcomes[i]!.tat, now)
  return outcomes
}
