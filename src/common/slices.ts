/**
 * Long work on the event loop, written once as a generator that yields where it may pause, and run either at once
 * (start-up, `portcullis check`) or a slice at a time with an event-loop turn between slices (a hot reload, while
 * requests are being served: docs/performance.md, "How the cost grows: routes").
 */
import { setImmediate } from 'node:timers'

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

/** Runs `steps`, awaiting `pause()` at each yield. */
export async function runInSlices<T>(steps: Steps<T>, pause: () => Promise<void> = nextTurn): Promise<T> {
  for (;;) {
    const step = steps.next()
    if (step.done === true) return step.value
    await pause()
  }
}
