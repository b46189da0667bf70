/**
 * How many Client ID Metadata Documents one client address may make the server fetch
 * (`client_metadata_documents.rate`): a client_id is a URL of the sender's choosing, so each fetch is work and
 * a connection the sender picks. Counted per address in a fixed window, every fetch started (one that fails
 * included), and at most `concurrent` in flight per address; beyond either, 429 with Retry-After and no fetch.
 * A lookup served from the cache, or sharing a fetch already in flight, costs nothing.
 */
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible'
import { TooManyAttempts } from '../../errors/oauth-errors.js'

export interface FetchBoundSettings {
  readonly fetches: number
  readonly windowSeconds: number
  readonly concurrent: number
}

export const DEFAULT_FETCH_BOUNDS: FetchBoundSettings = { fetches: 20, windowSeconds: 60, concurrent: 2 }

export class FetchBounds {
  private readonly started: RateLimiterMemory
  private readonly inFlight = new Map<string, number>()

  constructor(private readonly settings: FetchBoundSettings) {
    this.started = new RateLimiterMemory({ keyPrefix: 'portcullis-metadata-fetches', points: settings.fetches, duration: settings.windowSeconds })
  }

  /** Counts one fetch for `address`, or throws TooManyAttempts; the caller calls the returned function when it ends. */
  async admit(address: string): Promise<() => void> {
    const running = this.inFlight.get(address) ?? 0
    if (running >= this.settings.concurrent) {
      throw new TooManyAttempts(1, `${running} client_id metadata document fetches already in flight for this address`,
        'too many client_id metadata documents fetched at once; retry later')
    }
    try {
      await this.started.consume(address, 1)
    } catch (error) {
      if (!(error instanceof RateLimiterRes)) throw error
      throw new TooManyAttempts(Math.max(1, Math.ceil(error.msBeforeNext / 1000)),
        `more than ${this.settings.fetches} client_id metadata document fetches from this address in the window`,
        'too many client_id metadata documents fetched; retry later')
    }
    // Counted after the wait: two lookups that passed the first test together must not both run past the bound.
    const now = this.inFlight.get(address) ?? 0
    if (now >= this.settings.concurrent) {
      throw new TooManyAttempts(1, `${now} client_id metadata document fetches already in flight for this address`,
        'too many client_id metadata documents fetched at once; retry later')
    }
    this.inFlight.set(address, now + 1)
    let ended = false
    return () => {
      if (ended) return
      ended = true
      const left = (this.inFlight.get(address) ?? 1) - 1
      if (left <= 0) this.inFlight.delete(address)
      else this.inFlight.set(address, left)
    }
  }
}
