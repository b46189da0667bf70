/**
 * `server.body_memory`: the bytes that request bodies read into memory (bodies up to `server.body_buffer_size`,
 * forms that may carry a token, MCP messages) hold in this process, at most. Many slow clients each sending a
 * body the gateway buffers would otherwise grow the heap until the process fails; past the budget a body is
 * refused 503 `temporarily_unavailable` with `Retry-After` (its rest never read) and the others go on. A request's
 * bytes are counted as they arrive and given back when its exchange ends (its response closes).
 */
import { TemporarilyUnavailable } from '../errors/oauth-errors.js'

/** `server.body_memory` by default: 4,000 bodies of the default `body_buffer_size` (64 KB) at once. */
export const DEFAULT_BODY_MEMORY = '256mb'

/** What one request holds (its exchange). */
export interface BodyHold {
  heldBytes: number
}

export class BodyMemory {
  /** Bytes held now, by every request of the process. */
  held = 0

  /** @param limit `server.body_memory` in bytes; 0: no budget */
  constructor(public limit: number) {}

  /** `bytes` more for `hold`; TemporarilyUnavailable (nothing taken) past the budget. */
  take(hold: BodyHold, bytes: number): void {
    if (this.limit > 0 && this.held + bytes > this.limit) {
      throw new TemporarilyUnavailable(`request bodies in memory hold server.body_memory (${this.limit} bytes)`, 1)
    }
    this.held += bytes
    hold.heldBytes += bytes
  }

  /** Gives back all that `hold` took. */
  release(hold: BodyHold): void {
    this.held -= hold.heldBytes
    hold.heldBytes = 0
  }
}
