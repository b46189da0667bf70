/**
 * The embedded server's signing keys (checklist §8): generated on first start and kept in the store as
 * `signing_key` artifacts (id = kid), one key per algorithm in use — the configured one, plus RS256, which
 * OpenID Connect requires for ID tokens (OIDC Discovery §3). Rotation follows JW-05: publish first, sign
 * after the publish delay, retire once every token the old key signed has expired.
 *
 * Which key signs is decided from the store alone, so that every process sharing it agrees: the highest
 * `generation` (0 for the first keys, +1 per rotation) that is active, then the oldest write. That last
 * rule settles two processes that both found an empty store: each writes its key, re-reads, and the one
 * whose key was written later sees the earlier one and withdraws its own. That rule needs write times
 * from one clock (one host: SQLite, memory); a store shared between hosts (Redis) also offers `withLock`,
 * so that one process generates the first keys while the others wait and then load them.
 *
 * With `keyEncryption` (the config's `signing.key_encryption_key`) every private JWK is stored sealed
 * (key-encryption.ts). Opening a store whose keys that KEK cannot open is refused before anything is
 * written; a running process that meets such a key on a reload publishes it (tokens other processes sign
 * with it still verify here) and keeps signing with the keys it has.
 */
import { performance } from 'node:perf_hooks'
import { createPrivateKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import {
  calculateJwkThumbprint, errors, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JSONWebKeySet, type JWK,
  type JWTVerifyGetKey,
} from 'jose'
import type { ActiveSigningKey, SigningAlgorithm, SigningKeys } from './context.js'
import {
  isSealedJwk, KEK_CONFIG_KEY, KeyEncryptionError, sealStoredKey, secondsLeft, wrongKeyMessage, type KeyEncryptionKey, type SealedJwk,
} from './key-encryption.js'
import type { AuthServerSettings } from './settings.js'
import type { ArtifactRecord, StorageAdapter } from './storage/adapter.js'

/** Store expiry of a key in service; re-written on every rotation. */
const KEY_LIFETIME_SECONDS = 10 * 365 * 24 * 3600
/** A token with an unknown kid re-reads the store at most this often (another process may have rotated). */
const UNKNOWN_KID_RELOAD_COOLDOWN_MS = 1000
/** Beyond the token TTL: verifiers' clock skew, a process that has not reloaded yet, in-flight requests. */
const RETIREMENT_MARGIN_SECONDS = 300

const KEY_TYPES: Readonly<Record<SigningAlgorithm, { kty: string; crv?: string }>> = {
  ES256: { kty: 'EC', crv: 'P-256' },
  RS256: { kty: 'RSA' },
  EdDSA: { kty: 'OKP', crv: 'Ed25519' },
}

/** The value of a `signing_key` artifact. */
interface StoredKey {
  readonly kid: string
  readonly alg: SigningAlgorithm
  readonly generation: number
  /** Milliseconds since the epoch, taken just before the write; `writeOrder` breaks ties within one millisecond. */
  readonly createdAt: number
  readonly writeOrder: string
  readonly activatesAt: number
  /** Set by the rotation that replaces this key: it leaves the JWKS, and the store, at this time. */
  readonly retiresAt?: number
  readonly publicJwk: JWK
  /** Exactly one of these: the private JWK in clear (no KEK configured when it was written), or sealed. */
  readonly privateJwk?: JWK
  readonly encryptedPrivateJwk?: SealedJwk
}

interface LoadedKey {
  readonly stored: StoredKey
  /** What the JWKS shows: public members only (JW-02), with kid, use and alg (JW-03). */
  readonly published: JWK
  readonly publicKey: CryptoKey
  /** For signing with node:crypto (crypto/jws.ts); missing when this process's KEK cannot open it. */
  readonly privateKey?: KeyObject
}

export interface KeyManagerOptions {
  /** The access-token algorithm; an RS256 key is kept as well. */
  algorithm: SigningAlgorithm
  /** JW-05: how long a new key is published before it signs. */
  publishDelayMs: number
  /** How long a replaced key stays published after its successor starts signing (the longest token TTL). */
  retireAfterSeconds: number
  now: () => number
  log: Pick<FastifyBaseLogger, 'info' | 'warn'>
  /** How often the store is re-read so a rotation by another process is seen (default 30 s; 0: never). */
  reloadIntervalMs?: number
  /** Seals the private keys written to the store and opens the sealed ones; without it they are written in clear. */
  keyEncryption?: KeyEncryptionKey
}

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

/** How long a rotated-out key stays published after its successor activates: the token TTL plus a margin. */
export function keyRetirementSeconds(settings: Pick<AuthServerSettings, 'accessTokenTtlSeconds'>): number {
  return settings.accessTokenTtlSeconds + RETIREMENT_MARGIN_SECONDS
}

const isRetired = (key: StoredKey, now: number) => key.retiresAt !== undefined && key.retiresAt <= now

/** Negative when `a` signs in preference to `b`: newest generation, then the earliest write, then kid. */
function signingOrder(a: StoredKey, b: StoredKey): number {
  if (a.generation !== b.generation) return b.generation - a.generation
  if (a.createdAt !== b.createdAt) return a.createdAt - b.createdAt
  if (a.writeOrder !== b.writeOrder) return BigInt(a.writeOrder) < BigInt(b.writeOrder) ? -1 : 1
  return a.kid < b.kid ? -1 : 1
}

function signerAmong(keys: readonly StoredKey[], alg: SigningAlgorithm, now: number): StoredKey | undefined {
  return keys.filter((key) => key.alg === alg && key.activatesAt <= now && !isRetired(key, now)).sort(signingOrder)[0]
}

function publicMembers(key: StoredKey): JWK {
  const { kid, alg, publicJwk: jwk } = key
  if (jwk.kty === 'RSA') return { kty: 'RSA', kid, use: 'sig', alg, n: jwk.n!, e: jwk.e! }
  if (jwk.kty === 'EC') return { kty: 'EC', kid, use: 'sig', alg, crv: jwk.crv!, x: jwk.x!, y: jwk.y! }
  return { kty: 'OKP', kid, use: 'sig', alg, crv: jwk.crv!, x: jwk.x! }
}

/** Why a stored value is not a key we will use, if it is not (hand-edited stores, symmetric keys, weak RSA). */
function storedKeyProblem(id: string, value: Record<string, unknown>): string | undefined {
  const { kid, alg, publicJwk, privateJwk, encryptedPrivateJwk } = value as Partial<StoredKey>
  if (kid !== id) return 'kid does not match its id'
  if (typeof alg !== 'string' || !Object.hasOwn(KEY_TYPES, alg)) return 'unsupported alg'
  for (const member of ['generation', 'createdAt', 'activatesAt'] as const) if (typeof value[member] !== 'number') return `no ${member}`
  if (typeof value.writeOrder !== 'string' || !/^\d+$/.test(value.writeOrder)) return 'no writeOrder'
  if (value.retiresAt !== undefined && typeof value.retiresAt !== 'number') return 'bad retiresAt'
  if (typeof publicJwk !== 'object' || publicJwk === null) return 'no JWK'
  if (encryptedPrivateJwk !== undefined) {
    if (privateJwk !== undefined) return 'both a clear and an encrypted private key'
    if (!isSealedJwk(encryptedPrivateJwk)) return 'malformed encryptedPrivateJwk'
  } else if (typeof privateJwk !== 'object' || privateJwk === null) return 'no JWK'
  const expected = KEY_TYPES[alg]
  if (publicJwk.kty !== expected.kty || (privateJwk && privateJwk.kty !== expected.kty) || publicJwk.crv !== expected.crv) return `not a ${alg} key`
  // JW-03: o4w refuses RSA moduli under 2048 bits.
  if (expected.kty === 'RSA' && Buffer.from(publicJwk.n ?? '', 'base64url').length < 256) return 'RSA modulus under 2048 bits'
  if (privateJwk && typeof privateJwk.d !== 'string') return 'no private key'
  return undefined
}

/** A key not written yet: `write` stamps its time (and seals its private JWK, with a KEK). */
type NewKey = Omit<StoredKey, 'createdAt' | 'writeOrder' | 'activatesAt' | 'privateJwk' | 'encryptedPrivateJwk'> & { readonly privateJwk: JWK }

async function generateKey(alg: SigningAlgorithm, generation: number): Promise<NewKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 })
  const publicJwk = await exportJWK(publicKey)
  // RFC 7638 thumbprint: unique per key, and anyone holding the JWKS can recompute it.
  const kid = await calculateJwkThumbprint(publicJwk, 'sha256')
  return { kid, alg, generation, publicJwk, privateJwk: await exportJWK(privateKey) }
}

export class KeyManager implements SigningKeys {
  /** Every published key by kid, its CryptoKeys imported once. */
  private keys: ReadonlyMap<string, LoadedKey> = new Map()
  private timer: NodeJS.Timeout | undefined
  private reloading: Promise<void> | undefined
  /** performance.now() of the last reload: the cooldown is about store load, not token time. */
  private lastReload = Number.NEGATIVE_INFINITY
  private readonly algorithms: readonly SigningAlgorithm[]
  /** Kids whose private key this process could not open: warned of once. */
  private readonly unopened = new Set<string>()

  private constructor(private readonly store: StorageAdapter, private readonly options: KeyManagerOptions) {
    this.algorithms = options.algorithm === 'RS256' ? ['RS256'] : [options.algorithm, 'RS256']
  }

  /** Loads the keys from the store, generating the missing ones (first start), and starts reloading them. */
  static async open(store: StorageAdapter, options: KeyManagerOptions): Promise<KeyManager> {
    const manager = new KeyManager(store, options)
    // Before anything is written: a wrong or missing KEK must not lead to keys generated beside the ones it cannot open.
    const clear = await manager.checkEncryption()
    if (options.keyEncryption && clear.length > 0) await manager.sealClearKeys(clear, options.keyEncryption)
    await manager.install(await manager.ensureKeys(), { strict: true })
    const interval = options.reloadIntervalMs ?? 30_000
    if (interval > 0) {
      manager.timer = setInterval(() => manager.reloadInBackground(), interval)
      manager.timer.unref()
    }
    return manager
  }

  current(alg: SigningAlgorithm): ActiveSigningKey {
    const usable = [...this.keys.values()].filter((key) => key.privateKey !== undefined).map((key) => key.stored)
    const signer = signerAmong(usable, alg, this.options.now())
    if (!signer) throw new Error(`no active ${alg} signing key`)
    return { kid: signer.kid, alg, privateKey: this.keys.get(signer.kid)!.privateKey! }
  }

  jwks(): JSONWebKeySet {
    const now = this.options.now()
    return { keys: [...this.keys.values()].filter((key) => !isRetired(key.stored, now)).map((key) => ({ ...key.published })) }
  }

  /** JW-04, JW-06: the header's kid must name a published key of the header's alg; nothing else is tried. */
  readonly getKey: JWTVerifyGetKey = async (header) => {
    const { kid, alg } = header
    if (typeof kid !== 'string') throw new errors.JWKSNoMatchingKey('the token has no kid')
    let key = this.published(kid)
    if (!key && performance.now() - this.lastReload >= UNKNOWN_KID_RELOAD_COOLDOWN_MS) {
      await this.reload().catch((error: unknown) => this.options.log.warn({ err: error }, 'could not reload the signing keys from the store'))
      key = this.published(kid)
    }
    if (!key || key.stored.alg !== alg) throw new errors.JWKSNoMatchingKey()
    return key.publicKey
  }

  /**
   * JW-05: a new key per algorithm in use, published now and signing from now + publishDelayMs; every key
   * it replaces gets `retiresAt` = that time + retireAfterSeconds and then leaves the JWKS and the store.
   */
  async rotate(): Promise<RotationResult> {
    const { now, publishDelayMs, retireAfterSeconds } = this.options
    const existing = await this.readStore()
    const activatesAt = now() + publishDelayMs
    const retiresAt = activatesAt + retireAfterSeconds * 1000
    const added: string[] = []
    // The new keys are written first: a crash between the two steps leaves the old keys in service.
    for (const alg of this.algorithms) {
      const generation = Math.max(-1, ...existing.filter((key) => key.alg === alg).map((key) => key.generation)) + 1
      const key = await this.write(await generateKey(alg, generation), activatesAt)
      added.push(key.kid)
    }
    const retiring: string[] = []
    for (const key of existing) {
      // A key already retiring stopped signing when its first successor activated: its date stands.
      if (key.retiresAt !== undefined) continue
      await this.store.upsert('signing_key', key.kid, { ...key, retiresAt }, Math.ceil((retiresAt - now()) / 1000))
      retiring.push(key.kid)
    }
    this.options.log.info({ added, retiring, activatesAt: new Date(activatesAt).toISOString(), retiresAt: new Date(retiresAt).toISOString() },
      'signing keys rotated')
    await this.reload()
    return { added, retiring, activatesAt, retiresAt }
  }

  /** reload() without waiting: a failure is logged and the loaded keys stay in service. */
  reloadInBackground(): void {
    this.reload().catch((error: unknown) =>
      this.options.log.warn({ err: error }, 'could not reload the signing keys from the store; keeping the loaded ones'))
  }

  /** Re-reads the store (what the timer does); concurrent calls share one read. */
  reload(): Promise<void> {
    this.reloading ??= (async () => {
      try {
        await this.install(await this.readStore())
      } finally {
        this.lastReload = performance.now()
        this.reloading = undefined
      }
    })()
    return this.reloading
  }

  close(): void {
    clearInterval(this.timer)
    this.timer = undefined
  }

  private published(kid: string): LoadedKey | undefined {
    const key = this.keys.get(kid)
    return key && !isRetired(key.stored, this.options.now()) ? key : undefined
  }

  /**
   * Read only: refuses (KeyEncryptionError, naming the config key) a store holding keys in service that the
   * configured KEK cannot open, or any sealed key when no KEK is set. Returns the keys kept in clear.
   */
  private async checkEncryption(): Promise<ArtifactRecord[]> {
    const kek = this.options.keyEncryption
    const clear: ArtifactRecord[] = []
    const unreadable: Array<{ kid: string; kekId: string }> = []
    for (const record of await this.store.list('signing_key')) {
      if (storedKeyProblem(record.id, record.value) !== undefined) continue
      const key = record.value as unknown as StoredKey
      if (isRetired(key, this.options.now())) continue
      const sealed = key.encryptedPrivateJwk
      if (sealed === undefined) clear.push(record)
      else if (sealed.kekId !== kek?.id) unreadable.push({ kid: key.kid, kekId: sealed.kekId })
      else this.open(key)
    }
    if (unreadable.length > 0) {
      throw new KeyEncryptionError(wrongKeyMessage(kek, unreadable.map((key) => key.kekId), unreadable.map((key) => key.kid)))
    }
    return clear
  }

  /**
   * A KEK set on a store written without one: each key in clear is sealed in place (one upsert, its expiry
   * kept), so setting the key is enough to encrypt the store. A crash half-way leaves the rest in clear,
   * sealed at the next start.
   */
  private async sealClearKeys(records: readonly ArtifactRecord[], kek: KeyEncryptionKey): Promise<void> {
    for (const record of records) {
      const key = record.value as unknown as StoredKey
      await this.store.upsert('signing_key', key.kid, sealStoredKey(key.kid, key.alg, record.value, key.privateJwk!, kek), secondsLeft(record, this.options.now()))
    }
    this.options.log.info({ kids: records.map((record) => record.id), kekId: kek.id },
      `signing keys stored in clear are now encrypted with ${KEK_CONFIG_KEY}`)
  }

  /** The private JWK of a stored key, opened with the KEK if it is sealed; throws KeyEncryptionError. */
  private open(key: StoredKey): JWK {
    const sealed = key.encryptedPrivateJwk
    if (sealed === undefined) return key.privateJwk!
    const kek = this.options.keyEncryption
    if (kek === undefined || sealed.kekId !== kek.id) throw new KeyEncryptionError(wrongKeyMessage(kek, [sealed.kekId], [key.kid]))
    try {
      return kek.open(key.kid, key.alg, sealed)
    } catch (error) {
      throw new KeyEncryptionError(`${(error as Error).message}; nothing in the store was changed`)
    }
  }

  /** The keys in the store, generating the missing ones first (first start) under the store's lock, if it has one. */
  private async ensureKeys(): Promise<StoredKey[]> {
    const keys = await this.readStore()
    if (this.algorithms.every((alg) => keys.some((key) => key.alg === alg))) return keys
    return this.store.withLock ? this.store.withLock('signing-keys', () => this.generateMissing()) : this.generateMissing()
  }

  /** Writes a key for every algorithm that has none, then keeps it only if it won (see the file comment). */
  private async generateMissing(): Promise<StoredKey[]> {
    let keys = await this.readStore()
    const missing = this.algorithms.filter((alg) => !keys.some((key) => key.alg === alg))
    if (missing.length === 0) return keys
    const candidates = await Promise.all(missing.map((alg) => generateKey(alg, 0)))
    const mine: StoredKey[] = []
    // A first key replaces nothing, so it signs at once (no publish delay), and from time 0: another host
    // whose clock is behind this one's must be able to sign with it too.
    for (const candidate of candidates) mine.push(await this.write(candidate, 0))
    keys = await this.readStore()
    for (const key of mine) {
      const winner = signerAmong(keys, key.alg, this.options.now())
      if (winner === undefined || winner.kid === key.kid) {
        this.options.log.info({ kid: key.kid, alg: key.alg }, 'signing key generated')
        continue
      }
      // Another process wrote its first key before ours: ours never signed anything, so it can go.
      await this.store.destroy('signing_key', key.kid)
      keys = keys.filter((other) => other.kid !== key.kid)
    }
    return keys
  }

  /**
   * Stamps the time just before the write, with nothing awaited in between, so that the stamps follow the
   * order of the writes (hrtime is one monotonic clock for every process of a host).
   */
  private async write(key: NewKey, activatesAt?: number): Promise<StoredKey> {
    const kek = this.options.keyEncryption
    const { privateJwk, ...rest } = key
    // Sealed before the time is stamped: nothing between the stamp and the write.
    const privatePart = kek ? { encryptedPrivateJwk: kek.seal(key.kid, key.alg, privateJwk) } : { privateJwk }
    const createdAt = this.options.now()
    const stored: StoredKey = { ...rest, ...privatePart, createdAt, writeOrder: process.hrtime.bigint().toString(), activatesAt: activatesAt ?? createdAt }
    await this.store.upsert('signing_key', stored.kid, { ...stored }, KEY_LIFETIME_SECONDS)
    return stored
  }

  /** The usable keys in the store; retired ones are deleted, unusable ones skipped with a warning. */
  private async readStore(): Promise<StoredKey[]> {
    const now = this.options.now()
    const keys: StoredKey[] = []
    for (const { id, value } of await this.store.list('signing_key')) {
      const problem = storedKeyProblem(id, value)
      if (problem) {
        this.options.log.warn({ kid: id, problem }, 'ignoring an unusable signing key in the store')
        continue
      }
      const key = value as unknown as StoredKey
      if (isRetired(key, now)) await this.store.destroy('signing_key', id)
      else keys.push(key)
    }
    return keys
  }

  /**
   * Swaps in the keys read from the store, importing only the ones not loaded yet. `strict` (opening):
   * a key the KEK cannot open fails the whole open; on a reload it is published without signing.
   */
  private async install(keys: readonly StoredKey[], { strict = false } = {}): Promise<void> {
    const now = this.options.now()
    const unserved = this.algorithms.filter((alg) => signerAmong(keys, alg, now) === undefined)
    if (unserved.length > 0 && this.keys.size > 0) {
      // The store lost keys that were in service (restored from an old backup, emptied by hand): tokens
      // signed with them are still out there, so keep serving what is loaded rather than nothing.
      this.options.log.warn({ algorithms: unserved }, 'the store holds no active signing key for these algorithms; keeping the loaded keys')
      return
    }
    const loaded = new Map<string, LoadedKey>()
    for (const stored of [...keys].sort((a, b) => a.alg.localeCompare(b.alg) || signingOrder(a, b))) {
      // A key loaded already is kept as it is: a rekey re-seals the same keys under a KEK this process may not have.
      const previous = this.keys.get(stored.kid)
      if (previous?.privateKey) {
        loaded.set(stored.kid, { ...previous, stored })
        continue
      }
      const published = publicMembers(stored)
      try {
        const publicKey = previous?.publicKey ?? await importJWK(published, stored.alg) as CryptoKey
        let privateJwk: JWK
        try {
          privateJwk = this.open(stored)
        } catch (error) {
          if (strict || !(error instanceof KeyEncryptionError)) throw error
          loaded.set(stored.kid, { stored, published, publicKey })
          if (!this.unopened.has(stored.kid)) {
            this.unopened.add(stored.kid)
            this.options.log.warn({ kid: stored.kid, reason: error.message },
              `a signing key in the store does not open with ${KEK_CONFIG_KEY}: it is published, but this process does not sign with it (restart it with the key the store uses)`)
          }
          continue
        }
        const privateKey = createPrivateKey({ key: privateJwk as JsonWebKey, format: 'jwk' })
        loaded.set(stored.kid, { stored, published, publicKey, privateKey })
      } catch (error) {
        if (error instanceof KeyEncryptionError) throw error
        this.options.log.warn({ kid: stored.kid, err: error }, 'ignoring a signing key in the store that does not import')
      }
    }
    this.keys = loaded
  }
}
