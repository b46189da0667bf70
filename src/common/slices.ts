/**
 * Long work on the event loop, written once as a generator that yields where it may pause, and run either at once
 * (start-up, `portcullis check`) or a slice at a time with an event-loop turn between slices (a hot reload, while
 * requests are being served: docs/performance.md, "How the cost grows: routes").
 */
import { performance } from 'node:perf_hooks'
import { setImmediate } from 'node:timers'
import { collectYoung } from './young-collection.js'

/** A computation that yields (nothing) wherever it may pause, and returns its result. */
export type Steps<T> = Generator<void, T, void>

/** Runs `steps` to the end without pausing. */
export function runAtOnce<T>(steps: Steps<T>): T {
  for (;;) {
    const step = steps.next()
    if (step.done === true) return step.value
  }
}

/** One event-loop turn: I/O that is ready (requests in flight) is handled before the promise settles. */
export const nextTurn = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve))

/**
 * Event-loop time a slice may take before it pauses: the latency it adds to a request that arrives meanwhile.
 * Steps yield more often than that (every few dozen routes), and a slice goes on through yields until it is spent.
 * 1 ms measured better than 2 (bench/reload.mjs --pin, with the loader's pieces of 200 routes: requests during
 * reloads over 10 ms 26-48 against 52-66, p99 14-17 against 16-27 ms; docs/performance.md, routes).
 */
export const SLICE_BUDGET_MS = 1

/** Runs `steps`, awaiting `pause()` at the first yield past `budgetMs` of work since the last pause. */
export async function runInSlices<T>(steps: Steps<T>, pause: () => Promise<void> = nextTurn, budgetMs = SLICE_BUDGET_MS): Promise<T> {
  let sliceStarted = performance.now()
  for (;;) {
    const step = steps.next()
    if (step.done === true) return step.value
    if (performance.now() - sliceStarted < budgetMs) continue
    // The slice's objects collected now, while they are few, rather than many slices' at once later.
    collectYoung()
    await pause()
    sliceStarted = performance.now()
  }
}
