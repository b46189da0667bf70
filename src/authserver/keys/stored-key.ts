/**
 * A signing key as the store keeps it: a `signing_key` artifact whose id is its kid. What makes a stored
 * value a key the server will use, and what of it the JWKS shows.
 */
import type { JWK } from 'jose'
import type { SigningAlgorithm } from '../../common/token-formats.js'
import { isSealedJwk, type SealedJwk } from '../key-encryption.js'

const KEY_TYPES: Readonly<Record<SigningAlgorithm, { kty: string; crv?: string }>> = {
  ES256: { kty: 'EC', crv: 'P-256' },
  RS256: { kty: 'RSA' },
  EdDSA: { kty: 'OKP', crv: 'Ed25519' },
}

/** The value of a `signing_key` artifact. */
export interface StoredKey {
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

/** A key not written yet: the storage stamps its time (and seals its private JWK, with a KEK). */
export type NewKey = Omit<StoredKey, 'createdAt' | 'writeOrder' | 'activatesAt' | 'privateJwk' | 'encryptedPrivateJwk'> & { readonly privateJwk: JWK }

export const isRetired = (key: StoredKey, now: number) => key.retiresAt !== undefined && key.retiresAt <= now

/**
 * What the JWKS shows of a key: public members only (RFC 7517 §4, §6: never `d`, `p`, `q`, `dp`, `dq`, `qi`,
 * `oth` nor `k`), with its kid, `use: "sig"` and alg.
 */
export function publicMembers(key: StoredKey): JWK {
  const { kid, alg, publicJwk: jwk } = key
  if (jwk.kty === 'RSA') return { kty: 'RSA', kid, use: 'sig', alg, n: jwk.n!, e: jwk.e! }
  if (jwk.kty === 'EC') return { kty: 'EC', kid, use: 'sig', alg, crv: jwk.crv!, x: jwk.x!, y: jwk.y! }
  return { kty: 'OKP', kid, use: 'sig', alg, crv: jwk.crv!, x: jwk.x! }
}

/** Why a stored value is not a key we will use, if it is not (hand-edited stores, symmetric keys, weak RSA). */
export function storedKeyProblem(id: string, value: Record<string, unknown>): string | undefined {
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
  // RFC 7518 §3.3: RSA keys of 2048 bits or more; strict clients (oauth4webapi) refuse smaller moduli.
  if (expected.kty === 'RSA' && Buffer.from(publicJwk.n ?? '', 'base64url').length < 256) return 'RSA modulus under 2048 bits'
  if (privateJwk && typeof privateJwk.d !== 'string') return 'no private key'
  return undefined
}
