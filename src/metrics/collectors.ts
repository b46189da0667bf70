/**
 * What the metrics read only when Prometheus scrapes: the validation counts, and the caches' and key sets'
 * own statistics, exported as they stand (never kept per request).
 */
import type { Counter, Gauge } from 'prom-client'
import type { DpopRefusalReason } from '../errors/oauth-errors.js'
import type { CacheStats, KeySetStats } from './stats.js'
import { UNKNOWN_ISSUER, type UnavailableReason, type ValidationCounts } from './validations.js'

const UNAVAILABLE: ReadonlySet<string> = new Set<UnavailableReason | DpopRefusalReason>(['keys_unavailable', 'introspection_unavailable', 'internal_error', 'dpop_replay_unavailable'])

/** The token cache metrics a scrape refreshes. */
export interface CacheMetrics {
  readonly cacheLookups: Counter<'cache' | 'result'>
  readonly cacheEvictions: Counter<'cache'>
  readonly cacheEntries: Gauge<'cache'>
  readonly cacheCapacity: Gauge<'cache'>
}

/** The key set metrics a scrape refreshes. */
export interface KeySetMetrics {
  readonly jwksFetches: Counter<'issuer' | 'result'>
  readonly jwksAge: Gauge<'issuer'>
  readonly jwksKeys: Gauge<'issuer'>
}

/** portcullis_token_validations_total from the counts of every (issuer, method). */
export function collectValidations(tokenValidations: Counter<'issuer' | 'method' | 'result' | 'reason'>, counts: Iterable<ValidationCounts>): void {
  tokenValidations.reset()
  for (const { issuer, method, valid, refused } of counts) {
    // A token of no configured issuer is never valid: no such series, rather than one stuck at 0.
    if (issuer !== UNKNOWN_ISSUER) tokenValidations.inc({ issuer, method, result: 'valid', reason: 'ok' }, valid)
    for (const [reason, count] of refused) {
      tokenValidations.inc({ issuer, method, result: UNAVAILABLE.has(reason) ? 'unavailable' : 'invalid', reason }, count)
    }
  }
}

export function collectCaches(metrics: CacheMetrics, caches: readonly CacheStats[]): void {
  // Counters kept by the caches themselves, exported as they stand (a reload starts new caches at 0,
  // which Prometheus' rate() reads as a counter reset).
  metrics.cacheLookups.reset()
  metrics.cacheEvictions.reset()
  metrics.cacheEntries.reset()
  metrics.cacheCapacity.reset()
  for (const cache of caches) {
    metrics.cacheLookups.inc({ cache: cache.name, result: 'hit' }, cache.hits)
    metrics.cacheLookups.inc({ cache: cache.name, result: 'miss' }, cache.misses)
    metrics.cacheEvictions.inc({ cache: cache.name }, cache.evictions)
    metrics.cacheEntries.set({ cache: cache.name }, cache.size)
    metrics.cacheCapacity.set({ cache: cache.name }, cache.maxEntries)
  }
}

export function collectKeySets(metrics: KeySetMetrics, sets: readonly KeySetStats[]): void {
  metrics.jwksFetches.reset()
  metrics.jwksAge.reset()
  metrics.jwksKeys.reset()
  for (const set of sets) {
    metrics.jwksFetches.inc({ issuer: set.issuer, result: 'success' }, set.fetches - set.failures)
    metrics.jwksFetches.inc({ issuer: set.issuer, result: 'failure' }, set.failures)
    metrics.jwksKeys.set({ issuer: set.issuer }, set.keys)
    if (set.ageMs !== undefined) metrics.jwksAge.set({ issuer: set.issuer }, set.ageMs / 1000)
  }
}
