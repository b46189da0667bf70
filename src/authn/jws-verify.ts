/**
 * JWS signature verification on node:crypto's synchronous `verify` (RFC 7518 §3). jose verifies through
 * WebCrypto, which costs about three times as much per ES256 signature; the keys still come from jose's
 * key sets as CryptoKeys, each imported for one algorithm, and are converted to KeyObjects once.
 */
import { KeyObject, constants, verify, type webcrypto } from 'node:crypto'
import type { JwsAlgorithm } from '../config/schema.js'

interface AlgorithmSpec {
  /** The digest node:crypto hashes with (null for EdDSA, which hashes itself). */
  readonly digest: string | null
  /** The WebCrypto algorithm the key must have been imported for, as jose imports it for this alg. */
  readonly keyAlgorithm: string
  readonly hash?: string
  readonly namedCurve?: string
  /** ECDSA: the exact length of an RFC 7518 §3.4 signature (R ‖ S). */
  readonly signatureLength?: number
  /** RSASSA-PSS: the salt length, the digest's size (RFC 7518 §3.5). */
  readonly saltLength?: number
}

const rsa = (bits: number): AlgorithmSpec => ({ digest: `sha${bits}`, keyAlgorithm: 'RSASSA-PKCS1-v1_5', hash: `SHA-${bits}` })
const pss = (bits: number): AlgorithmSpec => ({ digest: `sha${bits}`, keyAlgorithm: 'RSA-PSS', hash: `SHA-${bits}`, saltLength: bits / 8 })
const ecdsa = (bits: number, curve: string, signatureLength: number): AlgorithmSpec =>
  ({ digest: `sha${bits}`, keyAlgorithm: 'ECDSA', namedCurve: curve, signatureLength })

const SPECS: Readonly<Record<JwsAlgorithm, AlgorithmSpec>> = {
  RS256: rsa(256), RS384: rsa(384), RS512: rsa(512),
  PS256: pss(256), PS384: pss(384), PS512: pss(512),
  ES256: ecdsa(256, 'P-256', 64), ES384: ecdsa(384, 'P-384', 96), ES512: ecdsa(512, 'P-521', 132),
  EdDSA: { digest: null, keyAlgorithm: 'Ed25519' },
}

/** Thrown when a key cannot verify the token's algorithm (never expected: keys are imported per alg). */
export class UnusableKey extends Error {}

/** WebCrypto's CryptoKey class (a global in Node 20; `node:crypto` does not export it there). */
const CryptoKeyClass = (globalThis as unknown as { CryptoKey: abstract new () => webcrypto.CryptoKey }).CryptoKey

/** Each key once converted, with the algorithm it was checked for. */
const converted = new WeakMap<webcrypto.CryptoKey, { readonly alg: JwsAlgorithm; readonly keyObject: KeyObject }>()

/** The CryptoKey as a KeyObject, after checking it is a public verification key made for `alg`. */
function keyFor(key: unknown, alg: JwsAlgorithm, spec: AlgorithmSpec): KeyObject {
  if (!(key instanceof CryptoKeyClass)) throw new UnusableKey('the key is not a CryptoKey')
  const cached = converted.get(key)
  if (cached?.alg === alg) return cached.keyObject
  if (key.type !== 'public' || !key.usages.includes('verify')) throw new UnusableKey('the key is not a public verification key')
  const algorithm = key.algorithm as { name: string; hash?: { name: string }; namedCurve?: string; modulusLength?: number }
  const fits = algorithm.name === spec.keyAlgorithm
    && (spec.hash === undefined || (algorithm.hash?.name === spec.hash && (algorithm.modulusLength ?? 0) >= 2048))
    && (spec.namedCurve === undefined || algorithm.namedCurve === spec.namedCurve)
  if (!fits) throw new UnusableKey(`the key is not an ${alg} key`)
  const keyObject = KeyObject.from(key)
  converted.set(key, { alg, keyObject })
  return keyObject
}

/**
 * Whether `signature` is `alg`'s signature of `signingInput` (the token's first two segments) by `key`.
 * Throws UnusableKey when the key was not made for `alg`.
 */
export function verifyJwsSignature(alg: JwsAlgorithm, key: unknown, signingInput: string, signature: Buffer): boolean {
  const spec = SPECS[alg]
  const keyObject = keyFor(key, alg, spec)
  if (spec.signatureLength !== undefined && signature.length !== spec.signatureLength) return false
  const data = Buffer.from(signingInput, 'latin1')
  try {
    if (spec.signatureLength !== undefined) return verify(spec.digest, data, { key: keyObject, dsaEncoding: 'ieee-p1363' }, signature)
    if (spec.saltLength !== undefined) {
      return verify(spec.digest, data, { key: keyObject, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: spec.saltLength }, signature)
    }
    return verify(spec.digest, data, keyObject, signature)
  } catch {
    return false  // a signature node:crypto cannot even parse is no valid signature
  }
}

export function isSupportedAlgorithm(alg: string): alg is JwsAlgorithm {
  return Object.hasOwn(SPECS, alg)
}
