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

/** A full collection now, where V8 lets the process ask for one (a loader thread once its warm-up's garbage is done). */
export function collectAll(): void {
  // `gc()` alone: node 20's V8 takes `{ type: 'major' }` for a scavenge (young-collection.test.ts).
  collector()?.()
}
