/**
 * Signing keys in the store: read, written, retired and deleted as `signing_key` artifacts (id = kid).
 *
 * With a key-encryption key (the config's `signing.key_encryption_key`) every private JWK is written sealed
 * (key-encryption.ts). Opening a store whose keys that KEK cannot open is refused before anything is
 * written; keys found in clear under a KEK are sealed in place.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { JWK } from 'jose'
import {
  KEK_CONFIG_KEY, KeyEncryptionError, sealStoredKey, secondsLeft, wrongKeyMessage, type KeyEncryptionKey,
} from '../key-encryption.js'
import type { ArtifactRecord, StorageAdapter } from '../storage/adapter.js'
import { isRetired, storedKeyProblem, type NewKey, type StoredKey } from './stored-key.js'

/** Store expiry of a key in service; re-written on every rotation. */
const KEY_LIFETIME_SECONDS = 10 * 365 * 24 * 3600

export interface KeyStorageOptions {
  now: () => number
  log: Pick<FastifyBaseLogger, 'info' | 'warn'>
  /** Seals the private keys written to the store and opens the sealed ones; without it they are written in clear. */
  keyEncryption?: KeyEncryptionKey
}

export class KeyStorage {
  constructor(private readonly store: StorageAdapter, private readonly options: KeyStorageOptions) {}

  /** The usable keys in the store; retired ones are deleted, unusable ones skipped with a warning. */
  async read(): Promise<StoredKey[]> {
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
   * Stamps the time just before the write, with nothing awaited in between, so that the stamps follow the
   * order of the writes (hrtime is one monotonic clock for every process of a host).
   */
  async write(key: NewKey, activatesAt?: number): Promise<StoredKey> {
    const kek = this.options.keyEncryption
    const { privateJwk, ...rest } = key
    // Sealed before the time is stamped: nothing between the stamp and the write.
    const privatePart = kek ? { encryptedPrivateJwk: kek.seal(key.kid, key.alg, privateJwk) } : { privateJwk }
    const createdAt = this.options.now()
    const stored: StoredKey = { ...rest, ...privatePart, createdAt, writeOrder: process.hrtime.bigint().toString(), activatesAt: activatesAt ?? createdAt }
    await this.store.upsert('signing_key', stored.kid, { ...stored }, KEY_LIFETIME_SECONDS)
    return stored
  }

  /** Marks a key to leave the JWKS at `retiresAt` (ms since the epoch); the store drops it then too. */
  async retire(key: StoredKey, retiresAt: number): Promise<void> {
    await this.store.upsert('signing_key', key.kid, { ...key, retiresAt }, Math.ceil((retiresAt - this.options.now()) / 1000))
  }

  /** Deletes a key that never signed anything. */
  async discard(kid: string): Promise<void> {
    await this.store.destroy('signing_key', kid)
  }

  /** Runs `work` under the store's `signing-keys` lock when the store has locks (one shared by several hosts). */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    return this.store.withLock ? this.store.withLock('signing-keys', work) : work()
  }

  /**
   * Read only: refuses (KeyEncryptionError, naming the config key) a store holding keys in service that the
   * configured KEK cannot open, or any sealed key when no KEK is set. Returns the keys kept in clear.
   */
  async checkEncryption(): Promise<ArtifactRecord[]> {
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
  async sealClearKeys(records: readonly ArtifactRecord[], kek: KeyEncryptionKey): Promise<void> {
    for (const record of records) {
      const key = record.value as unknown as StoredKey
      await this.store.upsert('signing_key', key.kid, sealStoredKey(key.kid, key.alg, record.value, key.privateJwk!, kek), secondsLeft(record, this.options.now()))
    }
    this.options.log.info({ kids: records.map((record) => record.id), kekId: kek.id },
      `signing keys stored in clear are now encrypted with ${KEK_CONFIG_KEY}`)
  }

  /** The private JWK of a stored key, opened with the KEK if it is sealed; throws KeyEncryptionError. */
  open(key: StoredKey): JWK {
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
}
