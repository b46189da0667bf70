/**
 * The embedded server's signing keys: generated on first start and kept in the store as `signing_key`
 * artifacts (id = kid), one key per algorithm in use — the configured one, plus RS256, which OpenID
 * Connect requires for ID tokens (OIDC Discovery §3). This module loads them, signs with the one the
 * store says signs, publishes the JWKS and follows other processes' rotations by re-reading the store.
 *
 * - keys/generation.ts: new key pairs;
 * - keys/rotation.ts: which key signs, the first keys, rotation and retirement;
 * - keys/storage.ts: reading and writing them, sealed with `signing.key_encryption_key` when it is set.
 *
 * A running process that meets a key its KEK cannot open on a reload publishes it (tokens other processes
 * sign with it still verify here) and keeps signing with the keys it has.
 */
import { performance } from 'node:perf_hooks'
import { createPrivateKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { errors, importJWK, type CryptoKey, type JSONWebKeySet, type JWK, type JWTVerifyGetKey } from 'jose'
import type { SigningAlgorithm } from '../common/token-formats.js'
import { KEK_CONFIG_KEY, KeyEncryptionError, type KeyEncryptionKey } from './key-encryption.js'
import { ensureKeys, rotateKeys, signerAmong, signingOrder, type RotationResult } from './keys/rotation.js'
import type { ActiveSigningKey, SigningKeys } from './keys/signing-keys.js'
import { KeyStorage } from './keys/storage.js'
import { isRetired, publicMembers, type StoredKey } from './keys/stored-key.js'
import type { StorageAdapter } from './storage/adapter.js'

export { keyRetirementSeconds, type RotationResult } from './keys/rotation.js'

/** A token with an unknown kid re-reads the store at most this often (another process may have rotated). */
const UNKNOWN_KID_RELOAD_COOLDOWN_MS = 1000

interface LoadedKey {
  readonly stored: StoredKey
  /** What the JWKS shows: public members only, with kid, use and alg (keys/stored-key.ts). */
  readonly published: JWK
  readonly publicKey: CryptoKey
  /** For signing with node:crypto (crypto/jws.ts); missing when this process's KEK cannot open it. */
  readonly privateKey?: KeyObject
}

export interface KeyManagerOptions {
  /** The access-token algorithm; an RS256 key is kept as well. */
  algorithm: SigningAlgorithm
  /** `signing.rotation_publish_delay`: how long a new key is published before it signs. */
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

export class KeyManager implements SigningKeys {
  /** Every published key by kid, its CryptoKeys imported once. */
  private keys: ReadonlyMap<string, LoadedKey> = new Map()
  private timer: NodeJS.Timeout | undefined
  private reloading: Promise<void> | undefined
  /** performance.now() of the last reload: the cooldown is about store load, not token time. */
  private lastReload = Number.NEGATIVE_INFINITY
  private readonly algorithms: readonly SigningAlgorithm[]
  private readonly storage: KeyStorage
  /** Kids whose private key this process could not open: warned of once. */
  private readonly unopened = new Set<string>()

  private constructor(store: StorageAdapter, private readonly options: KeyManagerOptions) {
    this.algorithms = options.algorithm === 'RS256' ? ['RS256'] : [options.algorithm, 'RS256']
    this.storage = new KeyStorage(store, options)
  }

  /** Loads the keys from the store, generating the missing ones (first start), and starts reloading them. */
  static async open(store: StorageAdapter, options: KeyManagerOptions): Promise<KeyManager> {
    const manager = new KeyManager(store, options)
    // Before anything is written: a wrong or missing KEK must not lead to keys generated beside the ones it cannot open.
    const clear = await manager.storage.checkEncryption()
    if (options.keyEncryption && clear.length > 0) await manager.storage.sealClearKeys(clear, options.keyEncryption)
    await manager.install(await ensureKeys(manager.storage, manager.algorithms, options), { strict: true })
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

  /**
   * The header's kid must name a published key of the header's alg; nothing else is tried (RFC 7515 §4.1.4,
   * RFC 8725 §3.1: the algorithm is the key's, never the token's choice).
   */
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

  /** A new key per algorithm in use, published now, signing after the publish delay (keys/rotation.ts). */
  async rotate(): Promise<RotationResult> {
    const result = await rotateKeys(this.storage, this.algorithms, this.options)
    await this.reload()
    return result
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
        await this.install(await this.storage.read())
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
          privateJwk = this.storage.open(stored)
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
