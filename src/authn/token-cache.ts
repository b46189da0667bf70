/**
 * A bounded cache of validation results keyed by a SHA-256 of the token (never the raw token), with
 * expiry on the injected clock and counters the metrics issue publishes as they are.
 */
import { hash } from 'node:crypto'
import { SecondChance, type Visited } from './second-chance.js'
import type { CacheStats } from '../metrics/stats.js'
export type { CacheStats } from '../metrics/stats.js'

/** base64url SHA-256 of a token: the only form in which a token is ever kept or logged about. */
export function tokenHash(token: string): string {
  return hash('sha256', token, 'base64url')
}

export interface Expiring extends Visited {
  /** Milliseconds since the epoch after which the entry must not be used. */
  readonly expiresAtMs: number
}

export class TokenCache<V extends Expiring> {
  private readonly entries: SecondChance<V>
  private hits = 0
  private misses = 0
  private expirations = 0
  private invalidations = 0
  /**
   * Bumped by every invalidation. A validation that began before one is not cached: its answer may
   * predate the revocation that caused it (the endpoint said active, the token was revoked meanwhile).
   */
  private generation = 0
  /** Promises of validations in flight, by cache key (single-flight). */
  readonly inflight = new Map<string, Promise<V>>()

  constructor(readonly name: string, readonly maxEntries: number, private readonly now: () => number) {
    this.entries = new SecondChance<V>(maxEntries)
  }

  get(key: string): V | undefined {
    const value = this.entries.get(key)
    if (value === undefined) {
      this.misses++
      return undefined
    }
    if (value.expiresAtMs <= this.now()) {
      this.entries.delete(key)
      this.expirations++
      this.misses++
      return undefined
    }
    this.hits++
    return value
  }

  set(key: string, value: V): void {
    if (value.expiresAtMs > this.now()) this.entries.set(key, value)
  }

  /**
   * The cached value, or the one validation in flight for this key, or a new one started by `load`;
   * concurrent callers with the same key share one `load`. The loaded value is cached here (callers need
   * not `set` it), unless an invalidation happened while it was loading.
   */
  async getOrLoad(key: string, load: () => Promise<V>): Promise<V> {
    const cached = this.get(key)
    if (cached !== undefined) return cached
    return this.load(key, load)
  }

  /** After a {@link get} missed: joins the validation in flight for this key, or starts `load` as it. */
  load(key: string, load: () => Promise<V>): Promise<V> {
    let pending = this.inflight.get(key)
    if (!pending) {
      const generation = this.generation
      const flight: Promise<V> = load()
        .then((value) => {
          if (generation === this.generation) this.set(key, value)
          return value
        })
        // Only our own flight: an invalidation may have replaced it with a newer one for the same key.
        .finally(() => { if (this.inflight.get(key) === flight) this.inflight.delete(key) })
      pending = flight
      this.inflight.set(key, pending)
    }
    return pending
  }

  delete(key: string): boolean {
    this.generation++
    this.inflight.delete(key)
    const deleted = this.entries.delete(key)
    if (deleted) this.invalidations++
    return deleted
  }

  /** Drops every entry the predicate selects; O(size), for the rare revocation by jti, sub or client. */
  deleteWhere(select: (value: V, key: string) => boolean): number {
    // Whose token a validation in flight is about is not known yet: no new request joins any of them.
    this.generation++
    this.inflight.clear()
    let count = 0
    for (const [key, value] of this.entries.entries()) {
      if (select(value, key) && this.entries.delete(key)) count++
    }
    this.invalidations += count
    return count
  }

  /** The keys held now (tests check that none is a raw token). */
  keys(): string[] {
    return this.entries.keys()
  }

  stats(): CacheStats {
    return {
      name: this.name,
      hits: this.hits,
      misses: this.misses,
      evictions: this.entries.evicted,
      expirations: this.expirations,
      invalidations: this.invalidations,
      size: this.entries.size,
      maxEntries: this.maxEntries,
      inflight: this.inflight.size,
    }
  }
}
