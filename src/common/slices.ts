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

/** Items sorted at once below this many; above, runs of it sorted at once, then merged with a yield every this many. */
const SORT_RUN = 512

/**
 * Sorts `items` in place, as steps: runs of {@link SORT_RUN} sorted by `Array.prototype.sort`, then merged pairwise
 * (a bottom-up merge sort), yielding after each run and every {@link SORT_RUN} merged items. Stable, as `sort` is:
 * items that compare equal keep their order. 10,000 routes sorted at once hold the event loop 2–4 ms.
 */
export function* sortSteps<T>(items: T[], compare: (a: T, b: T) => number): Steps<void> {
  const n = items.length
  if (n <= SORT_RUN) {
    items.sort(compare)
    return
  }
  for (let start = 0; start < n; start += SORT_RUN) {
    const run = items.slice(start, start + SORT_RUN).sort(compare)
    for (let i = 0; i < run.length; i++) items[start + i] = run[i]!
    yield
  }
  let from = items
  let to = new Array<T>(n)
  let sinceYield = 0
  for (let width = SORT_RUN; width < n; width *= 2) {
    for (let low = 0; low < n; low += 2 * width) {
      const middle = Math.min(low + width, n)
      const high = Math.min(low + 2 * width, n)
      let i = low
      let j = middle
      let k = low
      // Runs already in order (a reload's table, whose kept rules are mostly where they were): copied, not compared.
      if (j < high && compare(from[j]!, from[j - 1]!) >= 0) {
        for (; k < high; k++) to[k] = from[k]!
        continue
      }
      while (i < middle && j < high) {
        // The left run's item first on a tie: stable.
        to[k++] = compare(from[j]!, from[i]!) < 0 ? from[j++]! : from[i++]!
        if (++sinceYield >= SORT_RUN) {
          sinceYield = 0
          yield
        }
      }
      while (i < middle) to[k++] = from[i++]!
      while (j < high) to[k++] = from[j++]!
    }
    [from, to] = [to, from]
  }
  if (from !== items) for (let i = 0; i < n; i++) items[i] = from[i]!
}
