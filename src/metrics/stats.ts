/** What the metrics read from the caches they report on (the features fill these in; metrics import no feature). */

export interface CacheStats {
  readonly name: string
  readonly hits: number
  readonly misses: number
  /** Entries pushed out by the size bound (not expiries, not explicit invalidations). */
  readonly evictions: number
  /** Entries dropped because they expired, or were invalidated. */
  readonly expirations: number
  readonly invalidations: number
  readonly size: number
  readonly maxEntries: number
  /** Validations running now that concurrent requests for the same token wait on. */
  readonly inflight: number
}

export interface KeySetStats {
  readonly issuer: string
  /** Key-set documents requested, successful or not. */
  readonly fetches: number
  readonly failures: number
  readonly keys: number
  /** Milliseconds since the key set in use was fetched; undefined before the first success. */
  readonly ageMs: number | undefined
}
