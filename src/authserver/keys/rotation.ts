/**
 * Which key signs, and when keys change: the first keys of an empty store, and rotation as OpenID Connect
 * Core §10.1.1 describes it: publish the new key first, sign with it after the publish delay
 * (`signing.rotation_publish_delay`: clients cache a JWKS for its max-age), and keep the old one published
 * until every token it signed has expired.
 *
 * Which key signs is decided from the store alone, so that every process sharing it agrees: the highest
 * `generation` (0 for the first keys, +1 per rotation) that is active, then the oldest write. That last
 * rule settles two processes that both found an empty store: each writes its key, re-reads, and the one
 * whose key was written later sees the earlier one and withdraws its own. That rule needs write times
 * from one clock (one host: SQLite, memory); a store shared between hosts (Redis) also offers a lock,
 * so that one process generates the first keys while the others wait and then load them.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { SigningAlgorithm } from '../../common/token-formats.js'
import type { AuthServerSettings } from '../settings.js'
import { generateKey } from './generation.js'
import type { KeyStorage } from './storage.js'
import { isRetired, type StoredKey } from './stored-key.js'

/** Beyond the token TTL: verifiers' clock skew, a process that has not reloaded yet, in-flight requests. */
const RETIREMENT_MARGIN_SECONDS = 300

export interface RotationResult {
  /** The new keys, one per algorithm in use. */
  added: string[]
  /** The keys they replace. */
  retiring: string[]
  /** When the new keys start signing (ms since the epoch). */
  activatesAt: number
  /** When the replaced keys leave the JWKS (ms since the epoch). */
  retiresAt: number
}

/** When a rotation's keys sign and its predecessors leave, and where it is reported. */
export interface RotationSchedule {
  /** `signing.rotation_publish_delay`: how long a new key is published before it signs. */
  publishDelayMs: number
  /** How long a replaced key stays published after its successor starts signing (the longest token TTL). */
  retireAfterSeconds: number
  now: () => number
  log: Pick<FastifyBaseLogger, 'info'>
}

/** How long a rotated-out key stays published after its successor activates: the token TTL plus a margin. */
export function keyRetirementSeconds(settings: Pick<AuthServerSettings, 'accessTokenTtlSeconds'>): number {
  return settings.accessTokenTtlSeconds + RETIREMENT_MARGIN_SECONDS
}

/** Negative when `a` signs in preference to `b`: newest generation, then the earliest write, then kid. */
export function signingOrder(a: StoredKey, b: StoredKey): number {
  if (a.generation !== b.generation) return b.generation - a.generation
  if (a.createdAt !== b.createdAt) return a.createdAt - b.createdAt
  if (a.writeOrder !== b.writeOrder) return BigInt(a.writeOrder) < BigInt(b.writeOrder) ? -1 : 1
  return a.kid < b.kid ? -1 : 1
}

/** The key of `alg` that signs at `now`, if any is active and not retired. */
export function signerAmong(keys: readonly StoredKey[], alg: SigningAlgorithm, now: number): StoredKey | undefined {
  return keys.filter((key) => key.alg === alg && key.activatesAt <= now && !isRetired(key, now)).sort(signingOrder)[0]
}

/**
 * A new key per algorithm in use, published now and signing from now + publishDelayMs; every key it
 * replaces gets `retiresAt` = that time + retireAfterSeconds and then leaves the JWKS and the store.
 */
export async function rotateKeys(storage: KeyStorage, algorithms: readonly SigningAlgorithm[],
  schedule: RotationSchedule): Promise<RotationResult> {
  const { now, publishDelayMs, retireAfterSeconds } = schedule
  const existing = await storage.read()
  const activatesAt = now() + publishDelayMs
  const retiresAt = activatesAt + retireAfterSeconds * 1000
  const added: string[] = []
  // The new keys are written first: a crash between the two steps leaves the old keys in service.
  for (const alg of algorithms) {
    const generation = Math.max(-1, ...existing.filter((key) => key.alg === alg).map((key) => key.generation)) + 1
    const key = await storage.write(await generateKey(alg, generation), activatesAt)
    added.push(key.kid)
  }
  const retiring: string[] = []
  for (const key of existing) {
    // A key already retiring stopped signing when its first successor activated: its date stands.
    if (key.retiresAt !== undefined) continue
    await storage.retire(key, retiresAt)
    retiring.push(key.kid)
  }
  schedule.log.info({ added, retiring, activatesAt: new Date(activatesAt).toISOString(), retiresAt: new Date(retiresAt).toISOString() },
    'signing keys rotated')
  return { added, retiring, activatesAt, retiresAt }
}

/** The keys in the store, generating the missing ones first (first start) under the store's lock, if it has one. */
export async function ensureKeys(storage: KeyStorage, algorithms: readonly SigningAlgorithm[],
  clock: Pick<RotationSchedule, 'now' | 'log'>): Promise<StoredKey[]> {
  const keys = await storage.read()
  if (algorithms.every((alg) => keys.some((key) => key.alg === alg))) return keys
  return storage.exclusive(() => generateMissing(storage, algorithms, clock))
}

/** Writes a key for every algorithm that has none, then keeps it only if it won (see the file comment). */
async function generateMissing(storage: KeyStorage, algorithms: readonly SigningAlgorithm[],
  clock: Pick<RotationSchedule, 'now' | 'log'>): Promise<StoredKey[]> {
  let keys = await storage.read()
  const missing = algorithms.filter((alg) => !keys.some((key) => key.alg === alg))
  if (missing.length === 0) return keys
  const candidates = await Promise.all(missing.map((alg) => generateKey(alg, 0)))
  const mine: StoredKey[] = []
  // A first key replaces nothing, so it signs at once (no publish delay), and from time 0: another host
  // whose clock is behind this one's must be able to sign with it too.
  for (const candidate of candidates) mine.push(await storage.write(candidate, 0))
  keys = await storage.read()
  for (const key of mine) {
    const winner = signerAmong(keys, key.alg, clock.now())
    if (winner === undefined || winner.kid === key.kid) {
      clock.log.info({ kid: key.kid, alg: key.alg }, 'signing key generated')
      continue
    }
    // Another process wrote its first key before ours: ours never signed anything, so it can go.
    await storage.discard(key.kid)
    keys = keys.filter((other) => other.kid !== key.kid)
  }
  return keys
}
