/**
 * How many Client ID Metadata Documents one client address may make the server fetch
 * (`client_metadata_documents.rate`): a client_id is a URL of the sender's choosing, so each fetch is work and
 * a connection the sender picks. Counted per address in a fixed window, every fetch started (one that fails
 * included), and at most `concurrent` in flight per address; beyond either, 429 with Retry-After and no fetch.
 * A lookup served from the cache, or sharing a fetch already in flight, costs nothing.
 */
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible'
import { TooManyAttempts } from '../../errors/oauth-errors.js'
import { InFlightByKey } from '../../common/in-flight.js'

export interface FetchBoundSettings {
  readonly fetches: number
  readonly windowSeconds: number
  readonly concurrent: number
}

export const DEFAULT_FETCH_BOUNDS: FetchBoundSettings = { fetches: 20, windowSeconds: 60, concurrent: 2 }

export class FetchBounds {
  private readonly started: RateLimiterMemory
  private readonly inFlight = new InFlightByKey()

  constructor(private readonly settings: FetchBoundSettings) {
    this.started = new RateLimiterMemory({ keyPrefix: 'portcullis-metadata-fetches', points: settings.fetches, duration: settings.windowSeconds })
  }

  /** Counts one fetch for `address`, or throws TooManyAttempts; the caller calls the returned function when it ends. */
  async admit(address: string): Promise<() => void> {
    if (this.inFlight.count(address) >= this.settings.concurrent) throw this.tooManyAtOnce(address)
    try {
      await this.started.consume(address, 1)
    } catch (error) {
      if (!(error instanceof RateLimiterRes)) throw error
      throw new TooManyAttempts(Math.max(1, Math.ceil(error.msBeforeNext / 1000)),
        `more than ${this.settings.fetches} client_id metadata document fetches from this address in the window`,
        'too many client_id metadata documents fetched; retry later')
    }
    // Taken after the wait: two lookups that passed the first test together must not both run past the bound.
    const release = this.inFlight.take(address, this.settings.concurrent)
    if (release === undefined) throw this.tooManyAtOnce(address)
    return release
  }

  private tooManyAtOnce(address: string): TooManyAttempts {
    return new TooManyAttempts(1, `${this.inFlight.count(address)} client_id metadata document fetches already in flight for this address`,
      'too many client_id metadata documents fetched at once; retry later')
  }
}
