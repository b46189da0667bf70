/**
 * A young-generation collection on demand, between the slices of a long build on the event loop (common/slices.ts).
 * Left to itself, V8 collects the young generation when it is full: during a hot reload of 10,000 routes, whose new
 * table survives, each such collection copied tens of megabytes and held the event loop 27–65 ms (`--trace-gc`,
 * docs/performance.md). Collected after every slice, the young generation holds one slice's objects, and each
 * collection copies only those: a few milliseconds, between slices, where the pause was going to be anyway.
 *
 * `gc` exists only with `--expose-gc`; V8 reads that flag when a context is made, so it is set here and `gc` taken
 * from a context of its own, never exposed to the program's own global scope. Where that fails, nothing is collected
 * early (V8 then collects as it would).
 */
import v8 from 'node:v8'
import vm from 'node:vm'

type Collect = (options?: { type: 'minor' }) => void

let collect: Collect | null | undefined

function collector(): Collect | null {
  if (collect !== undefined) return collect
  try {
    v8.setFlagsFromString('--expose-gc')
    const found: unknown = vm.runInNewContext('typeof gc === "function" ? gc : undefined')
    collect = typeof found === 'function' ? found as Collect : null
  } catch {
    collect = null
  }
  return collect
}

/** Collects the young generation now (a scavenge), where V8 lets the process ask for one. */
export function collectYoung(): void {
  collector()?.({ type: 'minor' })
}

/**
 * What a slice may add to the young generation before {@link collectYoungPast} collects it: what a collection then copies
 * at most, about a millisecond's work on this project's VMs (docs/performance.md). A slice that made little (a reload
 * that keeps most of its rules: rules/compile.ts) is not worth a collection, whose fixed part is 0.3–0.5 ms.
 */
export const YOUNG_GROWTH_BYTES = 256 * 1024

/** Bytes in use in the young generation after the last collection this module asked for (or saw). */
let usedAfterLast = 0

/** Bytes in use in the young generation (about a microsecond to read); undefined where V8 does not name a new space. */
function youngUsed(): number | undefined {
  for (const space of v8.getHeapSpaceStatistics()) if (space.space_name === 'new_space') return space.space_used_size
  return undefined
}

/**
 * Collects the young generation when it holds `bytes` more than after the last collection; where its size cannot be
 * read, every time.
 */
export function collectYoungPast(bytes = YOUNG_GROWTH_BYTES): void {
  const used = youngUsed()
  if (used !== undefined && used - usedAfterLast < bytes) {
    // V8 collected meanwhile (its own scavenge): the growth counts from what it left.
    if (used < usedAfterLast) usedAfterLast = used
    return
  }
  collectYoung()
  usedAfterLast = youngUsed() ?? 0
}

/** A full collection now, where V8 lets the process ask for one (a loader thread once its warm-up's garbage is done). */
export function collectAll(): void {
  // `gc()` alone: node 20's V8 takes `{ type: 'major' }` for a scavenge (young-collection.test.ts).
  collector()?.()
}
