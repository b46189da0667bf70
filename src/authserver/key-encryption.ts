/**
 * Private signing keys at rest: AES-256-GCM under the key-encryption key (KEK) of
 * `authorization_server.signing.key_encryption_key`. Each stored key carries its own envelope: a random
 * 96-bit IV (NIST SP 800-38D §8.2.2), the ciphertext of the private JWK, the 128-bit tag, and the id of
 * the KEK that sealed it, so that a wrong KEK is named before anything is decrypted. The kid and alg are
 * the additional authenticated data: a ciphertext copied under another kid does not open.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'
import type { JWK } from 'jose'
import type { ArtifactRecord, StorageAdapter, StoredArtifact } from './storage/adapter.js'

export const KEK_CONFIG_KEY = 'authorization_server.signing.key_encryption_key'

import { KEK_FORMAT, KEK_PATTERN } from '../config/constants.js'
export { KEK_FORMAT, KEK_PATTERN }

/** The value of a stored key's `encryptedPrivateJwk`: every binary member base64url. */
export interface SealedJwk {
  readonly v: 1
  readonly enc: 'A256GCM'
  /** keyEncryptionKeyId() of the KEK that sealed it. */
  readonly kekId: string
  readonly iv: string
  readonly ciphertext: string
  readonly tag: string
}

/** The KEK is wrong or missing for what the store holds: `start` and the CLI refuse, and nothing is written. */
export class KeyEncryptionError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'KeyEncryptionError'
  }
}

const IV_BYTES = 12
const TAG_BYTES = 16

const additionalData = (kid: string, alg: string) => Buffer.from(`portcullis signing key v1\0${kid}\0${alg}`)

export function isSealedJwk(value: unknown): value is SealedJwk {
  if (typeof value !== 'object' || value === null) return false
  const sealed = value as Record<string, unknown>
  return sealed.v === 1 && sealed.enc === 'A256GCM' && typeof sealed.kekId === 'string' &&
    typeof sealed.iv === 'string' && typeof sealed.ciphertext === 'string' && typeof sealed.tag === 'string'
}

/**
 * The key named by `key_encryption_key`, with its id: the first 8 bytes of a SHA-256 over a label and
 * the key. The id says which key sealed an envelope; from 256 random bits it gives nothing away.
 */
export class KeyEncryptionKey {
  readonly id: string
  /** A private field: util.inspect, JSON and log serializers never see it. */
  readonly #key: Buffer

  private constructor(key: Buffer) {
    this.#key = key
    this.id = createHash('sha256').update('portcullis key-encryption-key id\0').update(key).digest('hex').slice(0, 16)
  }

  seal(kid: string, alg: string, jwk: JWK): SealedJwk {
    const iv = randomBytes(IV_BYTES)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES }).setAAD(additionalData(kid, alg))
    const ciphertext = Buffer.concat([cipher.update(JSON.stringify(jwk), 'utf8'), cipher.final()])
    return { v: 1, enc: 'A256GCM', kekId: this.id, iv: iv.toString('base64url'), ciphertext: ciphertext.toString('base64url'),
      tag: cipher.getAuthTag().toString('base64url') }
  }

  /** The private JWK; throws when the envelope was sealed by another KEK, for another kid, or altered. */
  open(kid: string, alg: string, sealed: SealedJwk): JWK {
    if (sealed.kekId !== this.id) throw new KeyEncryptionError(`the signing key ${kid} was encrypted with another key (key id ${sealed.kekId})`)
    const iv = Buffer.from(sealed.iv, 'base64url')
    const tag = Buffer.from(sealed.tag, 'base64url')
    if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) throw new KeyEncryptionError(`the signing key ${kid} has a malformed envelope`)
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES }).setAAD(additionalData(kid, alg)).setAuthTag(tag)
      const text = Buffer.concat([decipher.update(Buffer.from(sealed.ciphertext, 'base64url')), decipher.final()]).toString('utf8')
      return JSON.parse(text) as JWK
    } catch {
      throw new KeyEncryptionError(`the signing key ${kid} does not decrypt with ${KEK_CONFIG_KEY} (key id ${this.id}): ` +
        'its envelope was altered or copied from another kid')
    }
  }

  toJSON(): { id: string } {
    return { id: this.id }
  }

  /** `text` as the schema allows it (KEK_PATTERN); throws on anything else. */
  static parse(text: string): KeyEncryptionKey {
    const key = new RegExp(KEK_PATTERN).test(text) ? Buffer.from(text, 'base64') : undefined
    if (key?.length !== 32) throw new KeyEncryptionError(KEK_FORMAT)
    return new KeyEncryptionKey(key)
  }
}

/** What a `signing_key` artifact holds of its private part: exactly one of these. */
interface PrivatePart {
  readonly kid?: unknown
  readonly alg?: unknown
  readonly privateJwk?: JWK
  readonly encryptedPrivateJwk?: SealedJwk
}

/** The artifact with its private JWK sealed by `kek` (and no clear copy left in it). */
export function sealStoredKey(kid: string, alg: string, value: StoredArtifact, privateJwk: JWK, kek: KeyEncryptionKey): StoredArtifact {
  const { privateJwk: _clear, encryptedPrivateJwk: _sealed, consumedAt: _consumed, ...rest } = value as StoredArtifact & PrivatePart & { consumedAt?: number }
  return { ...rest, encryptedPrivateJwk: kek.seal(kid, alg, privateJwk) }
}

/** Seconds left of a stored record, for an upsert that must not change its expiry. */
export const secondsLeft = (record: ArtifactRecord, now: number) => Math.max(1, Math.ceil((record.expiresAt - now) / 1000))

/** Why the store's keys cannot be read with `kek` (or without a KEK), naming the config key; one line. */
export function wrongKeyMessage(kek: KeyEncryptionKey | undefined, foundIds: readonly string[], kids: readonly string[]): string {
  const found = [...new Set(foundIds)].join(', ')
  const one = kids.length === 1
  const which = `${one ? 'the signing key' : `${kids.length} signing keys`} in the store (${kids.join(', ')})`
  const sealedWith = one ? 'it was encrypted with' : 'they were encrypted with'
  if (!kek) {
    return `${which} ${one ? 'is' : 'are'} encrypted (key id ${found}) and ${KEK_CONFIG_KEY} is not set: ` +
      `set it to the key ${sealedWith}; nothing in the store was changed`
  }
  return `${KEK_CONFIG_KEY} (key id ${kek.id}) is not the key ${which} ${one ? 'was' : 'were'} encrypted with ` +
    `(key id ${found}): set the key ${sealedWith}, or finish portcullis keys rekey; nothing in the store was changed`
}

export interface RekeyResult {
  /** Re-encrypted under the new key (or encrypted, if they were in clear). */
  rekeyed: string[]
  /** Already under the new key (a rekey run again after it stopped half-way). */
  unchanged: string[]
}

/**
 * `portcullis keys rekey`: every signing key in the store sealed under `next`. A key may be in clear, under
 * `current` (the configured KEK) or under `next` already: each is decrypted first, and if one cannot be,
 * nothing is written. Then one upsert per key (atomic in every adapter), keeping its expiry: a run that
 * stops half-way leaves each key under either KEK, and running it again finishes the job.
 */
export async function rekeySigningKeys(store: StorageAdapter, current: KeyEncryptionKey | undefined, next: KeyEncryptionKey,
  now: () => number = Date.now): Promise<RekeyResult> {
  const records = await store.list('signing_key')
  const plans: Array<{ record: ArtifactRecord; alg: string; privateJwk: JWK }> = []
  const unchanged: string[] = []
  const unreadable: Array<{ kid: string; kekId: string }> = []
  for (const record of records) {
    const { alg, privateJwk, encryptedPrivateJwk: sealed } = record.value as PrivatePart
    if (typeof alg !== 'string') continue
    if (sealed === undefined) {
      // A key in clear: nothing to decrypt. Anything that is neither is not a key (keys.ts ignores it too).
      if (typeof privateJwk === 'object' && privateJwk !== null) plans.push({ record, alg, privateJwk })
      continue
    }
    if (!isSealedJwk(sealed)) continue
    const opener = sealed.kekId === next.id ? next : sealed.kekId === current?.id ? current : undefined
    if (!opener) {
      unreadable.push({ kid: record.id, kekId: sealed.kekId })
      continue
    }
    // Opened even when it is under `next` already: an envelope that does not open stops the run here.
    const opened = opener.open(record.id, alg, sealed)
    if (opener === next) unchanged.push(record.id)
    else plans.push({ record, alg, privateJwk: opened })
  }
  if (unreadable.length > 0) {
    const ids = [...new Set(unreadable.map((key) => key.kekId))].join(', ')
    throw new KeyEncryptionError(`${unreadable.length === 1 ? 'the signing key' : `${unreadable.length} signing keys`} ` +
      `${unreadable.map((key) => key.kid).join(', ')} ${unreadable.length === 1 ? 'is' : 'are'} encrypted with key id ${ids}, which is neither ` +
      `${KEK_CONFIG_KEY} (${current ? `key id ${current.id}` : 'not set'}) nor the new key (key id ${next.id}); nothing in the store was changed`)
  }
  const rekeyed: string[] = []
  for (const { record, alg, privateJwk } of plans) {
    await store.upsert('signing_key', record.id, sealStoredKey(record.id, alg, record.value, privateJwk, next), secondsLeft(record, now()))
    rekeyed.push(record.id)
  }
  return { rekeyed, unchanged }
}
