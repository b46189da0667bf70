/**
 * Rate-limit state in one process: per policy, a Map from key value to its TAT (gcra.ts). A check allocates
 * nothing but what Map.set may; a full map first drops the keys whose bucket has refilled (they are the same
 * as absent), then, if none has, the oldest inserted 1 %: those keys start over with a full bucket, so `max_keys`
 * bounds memory at the price of letting a key evicted early spend its budget again (documented; size it to
 * the keys of one window).
 */
import { gcra, type GcraOutcome, type GcraParameters } from './gcra.js'

export class MemoryBuckets {
  private readonly tats = new Map<string, number>()
  constructor(private readonly maxKeys: number) {}

  take(key: string, now: number, parameters: GcraParameters): GcraOutcome {
    const outcome = gcra(this.tats.get(key) ?? 0, now, parameters)
    if (outcome.allowed) {
      if (this.tats.size >= this.maxKeys && !this.tats.has(key)) this.makeRoom(now)
      this.tats.set(key, outcome.tat)
    }
    return outcome
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
