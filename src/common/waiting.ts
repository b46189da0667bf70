/**
 * Requests admitted and not yet answered (`server.admission.max_in_flight`): one count per process, shared by the
 * runtimes a reload swaps. A request holds its place from its admission until its response head goes out (a
 * stream then streams without holding one) or it closes, whichever comes first.
 */
export interface Waiting {
  count: number
}

/** What holds a place among the waiting: the per-request exchange. */
export interface HoldsPlace {
  waiting: Waiting | null
}

/** Gives `holder`'s place back, once: a second call (the head went out, then the request closed) does nothing. */
export function leaveWaiting(holder: HoldsPlace): void {
  const waiting = holder.waiting
  if (waiting !== null) {
    holder.waiting = null
    waiting.count--
  }
}
