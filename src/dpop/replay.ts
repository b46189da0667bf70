/**
 * Single use of a DPoP proof (RFC 9449 §11.1): each proof's `jti` is accepted once while its `iat` is inside
 * the window. In one process a bounded map; with several instances on Redis, one `SET NX` per proof in the
 * shared store, so a proof replayed on another instance is refused too.
 *
 * Bounded memory fails closed: when the map is full of live entries, the oldest is evicted and every proof
 * no newer than it is refused from then on (a legitimate proof is fresh: it is newer than anything evicted
 * unless the map holds less than its own clock skew of traffic).
 */
import { createHash } from 'node:crypto'
import { LRUCache } from 'lru-cache'

export interface ReplayCache {
  /**
   * True the first time `jti` of the key `jkt` is seen, false for a replay (or a proof too old to be told
   * apart from one). `ttlSeconds`: how long the proof stays acceptable (its window).
   */
  firstUse(jkt: string, jti: string, iat: number, ttlSeconds: number): boolean | Promise<boolean>
}

/** What the shared store offers (Redis: `SET key 1 NX EX ttl`); absent on stores one process uses. */
export interface SharedOnce {
  firstUse(id: string, expiresInSeconds: number): Promise<boolean>
}

/** The cache key: bounded and with nothing of the client's raw input in it. */
export function replayKey(jkt: string, jti: string): string {
  return createHash('sha256').update(jkt).update('\0').update(jti).digest('base64url')
}

export function memoryReplayCache(maxEntries: number): ReplayCache {
  /** Newest `iat` evicted while still inside its window: proofs no newer are refused. */
  let floor = -Infinity
  const seen = new LRUCache<string, number>({
    max: maxEntries,
    // An entry evicted for room while still live raises the floor; one evicted stale is outside any window anyway.
    dispose: (iat, _key, reason) => { if (reason === 'evict' && iat > floor) floor = iat },
  })
  return {
    firstUse(jkt, jti, iat, ttlSeconds) {
      if (iat <= floor) return false
      const key = replayKey(jkt, jti)
      if (seen.has(key)) return false
      seen.set(key, iat, { ttl: Math.max(1, ttlSeconds) * 1000 })
      return true
    },
  }
}

/** One `SET NX` per proof in the shared store. A store failure refuses the proof (fail closed), as the caller reports. */
export function sharedReplayCache(store: SharedOnce): ReplayCache {
  return {
    firstUse(jkt, jti, _iat, ttlSeconds) {
      return store.firstUse(`dpop:${replayKey(jkt, jti)}`, Math.max(1, Math.ceil(ttlSeconds)))
    },
  }
}
