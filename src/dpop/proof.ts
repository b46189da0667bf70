/**
 * DPoP proofs (RFC 9449 §4): the one verifier the embedded server's token endpoint and the gateway share.
 * A proof is a JWS the client signs per request with a key it holds; its header carries the public key, so
 * what binds it to anything is the key's thumbprint (RFC 7638), which a bound token names in `cnf.jkt`.
 *
 * §4.3, in order: one well-formed JWT; `typ` dpop+jwt; an allowed asymmetric `alg`; `jwk` a public key (no
 * private members); the signature; `htm` and `htu` (query and fragment ignored, compared as parsed URLs);
 * `iat` inside the window; `jti` present; `ath` the token's hash where a token is presented; `nonce` when
 * the verifier asks for one. Single use of `jti` is the caller's (a replay cache: dpop/replay.ts), after
 * everything else held, so a refused proof spends no cache entry.
 *
 * The protected header of one client key is the same on every request, so what is derived from it (the
 * imported key, the thumbprint) is cached by the header's encoded form: a verified proof then costs one
 * signature check and a small JSON parse. jose checks and imports the key; the per-request signature check is
 * node:crypto's synchronous `verify` with the imported key, measured at half the time of jose's
 * `compactVerify` (WebCrypto, asynchronous) for ES256 on these machines.
 */
import type { IncomingMessage } from 'node:http'
import { constants, createHash, KeyObject, verify as verifySignature, type VerifyKeyObjectInput, type webcrypto } from 'node:crypto'
import { calculateJwkThumbprint, importJWK, type JWK } from 'jose'
import { LRUCache } from 'lru-cache'

/** The algorithms a proof may use; asymmetric only (§4.2), never `none` or a MAC. */
import { DPOP_ALGORITHMS, type DpopAlgorithm } from '../config/constants.js'
import type { DpopProofFailure } from '../errors/oauth-errors.js'
export { DPOP_ALGORITHMS, type DpopAlgorithm }

/** A proof (header included) larger than this is refused before it is parsed: an RSA-4096 proof is ~1.5 KB. */
export const MAX_PROOF_SIZE = 8192

/** Why a proof was refused: the metrics' `reason` and the log's, never the proof. */
export type DpopFailure = DpopProofFailure

export class DpopProofError extends Error {
  /**
   * @param reason for logs and metrics
   * @param description safe to send (`error_description`): names the check, never a value from the proof
   * @param useNonce the failure is a missing or stale nonce: answer `use_dpop_nonce` with a fresh one
   */
  constructor(readonly reason: DpopFailure, readonly description: string, readonly useNonce = false) {
    super(description)
  }
}

export interface ProofSettings {
  readonly algorithms: readonly string[]
  /** How old a proof's `iat` may be, in seconds. */
  readonly maxAgeSeconds: number
  /** Tolerated clock difference, in seconds (a proof from slightly in the future, or slightly too old). */
  readonly clockSkewSeconds: number
}

export interface ExpectedRequest {
  /** The request's method, upper case. */
  readonly method: string
  /** The URL the client sent the request to (the gateway's public URL, not the upstream's). */
  readonly url: string
  /** The access token presented with the proof (resource requests): `ath` must be its hash. */
  readonly accessToken?: string | undefined
  /** When nonces are on: whether the proof's `nonce` is one this server issued and still accepts. */
  readonly nonceValid?: ((nonce: string) => boolean) | undefined
}

export interface VerifiedProof {
  /** RFC 7638 SHA-256 thumbprint of the proof's key, base64url: what `cnf.jkt` names. */
  readonly jkt: string
  readonly jti: string
  /** Seconds since the epoch. */
  readonly iat: number
}

interface KeyEntry {
  /** The key with the options `verify` needs for the alg (ECDSA signatures are r‖s, RFC 7518 §3.4). */
  readonly key: VerifyKeyObjectInput
  /** The digest, or null for EdDSA. */
  readonly hash: string | null
  readonly jkt: string
  readonly alg: string
}

/** RFC 7518 §3.1: each alg's digest and signature scheme. */
function verifyInput(alg: string, key: KeyObject): Pick<KeyEntry, 'key' | 'hash'> {
  if (alg === 'EdDSA' || alg === 'Ed25519') return { key: { key }, hash: null }
  const hash = `sha${alg.slice(2)}`
  if (alg.startsWith('ES')) return { key: { key, dsaEncoding: 'ieee-p1363' }, hash }
  if (alg.startsWith('PS')) return { key: { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: Number(alg.slice(2)) / 8 }, hash }
  return { key: { key, padding: constants.RSA_PKCS1_PADDING }, hash }
}

const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const
const keys = new LRUCache<string, KeyEntry>({ max: 10_000 })

function decodeJson(segment: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'))
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : undefined
  } catch {
    return undefined
  }
}

/** An RSA key's size in bits (jose hands back a WebCrypto CryptoKey on Node); other keys count as large enough. */
function modulusLength(key: KeyObject | webcrypto.CryptoKey): number {
  if (key instanceof KeyObject) return key.asymmetricKeyDetails?.modulusLength ?? Infinity
  return (key.algorithm as { modulusLength?: number }).modulusLength ?? Infinity
}

/** The key of a proof's protected header, checked (typ, alg, jwk) and imported once per distinct header. */
async function keyOf(headerSegment: string, algorithms: readonly string[]): Promise<KeyEntry> {
  const cached = keys.get(headerSegment)
  if (cached !== undefined) {
    if (!algorithms.includes(cached.alg)) throw new DpopProofError('dpop_alg', 'the DPoP proof uses an algorithm that is not accepted')
    return cached
  }
  const header = decodeJson(headerSegment)
  if (header === undefined) throw new DpopProofError('dpop_malformed', 'the DPoP proof is not a JWT')
  if (header.typ !== 'dpop+jwt') throw new DpopProofError('dpop_typ', 'the DPoP proof must have typ dpop+jwt')
  const alg = header.alg
  if (typeof alg !== 'string' || !algorithms.includes(alg)) throw new DpopProofError('dpop_alg', 'the DPoP proof uses an algorithm that is not accepted')
  const jwk = header.jwk
  if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) throw new DpopProofError('dpop_jwk', 'the DPoP proof must carry its public key as jwk')
  if (PRIVATE_MEMBERS.some((member) => Object.hasOwn(jwk, member))) {
    throw new DpopProofError('dpop_jwk', 'the DPoP proof\'s jwk must be a public key')
  }
  if (header.crit !== undefined) throw new DpopProofError('dpop_malformed', 'the DPoP proof has critical header parameters')
  let key: KeyObject | webcrypto.CryptoKey | Uint8Array
  let jkt: string
  try {
    key = await importJWK(jwk as JWK, alg)
    jkt = await calculateJwkThumbprint(jwk as JWK, 'sha256')
  } catch {
    throw new DpopProofError('dpop_jwk', 'the DPoP proof\'s jwk is not a usable public key for its alg')
  }
  if (key instanceof Uint8Array || key.type !== 'public') throw new DpopProofError('dpop_jwk', 'the DPoP proof\'s jwk must be a public key')
  if (modulusLength(key) < 2048) throw new DpopProofError('dpop_jwk', 'the DPoP proof\'s RSA key must be at least 2048 bits')
  const entry = { ...verifyInput(alg, key instanceof KeyObject ? key : KeyObject.from(key)), jkt, alg }
  keys.set(headerSegment, entry)
  return entry
}

/**
 * The request's one `DPoP` header (§4.3 item 1: exactly one), or undefined without one; two are
 * DpopProofError `dpop_multiple`. Most requests carry none: `headersDistinct` is built only for those that do.
 */
export function proofHeader(req: IncomingMessage): string | undefined {
  if (req.headers.dpop === undefined) return undefined
  const values = req.headersDistinct.dpop
  if (values === undefined || values.length === 0) return undefined
  if (values.length > 1) throw new DpopProofError('dpop_multiple', 'the request carries more than one DPoP header')
  return values[0]
}

/** §4.3 item 9: scheme, host, port and path as parsed URLs read them; query and fragment ignored. */
export function htuOf(url: string): string | undefined {
  if (!URL.canParse(url)) return undefined
  const parsed = new URL(url)
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return undefined
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`
}

/** base64url(SHA-256(token)): `ath` (§4.2). */
export function accessTokenHash(token: string): string {
  return createHash('sha256').update(token).digest('base64url')
}

/** Verifies `proof` for `expected`; throws DpopProofError. Does not check single use (the caller's replay cache does). */
export async function verifyProof(proof: string, expected: ExpectedRequest, settings: ProofSettings, nowSeconds: number): Promise<VerifiedProof> {
  if (proof.length > MAX_PROOF_SIZE) throw new DpopProofError('dpop_malformed', 'the DPoP proof is too large')
  const parts = proof.split('.')
  if (parts.length !== 3 || parts.some((part) => !/^[A-Za-z0-9_-]+$/.test(part))) {
    throw new DpopProofError('dpop_malformed', 'the DPoP proof is not a compact JWS')
  }
  const { key, hash, jkt } = await keyOf(parts[0]!, settings.algorithms)
  let valid: boolean
  try {
    valid = verifySignature(hash, Buffer.from(`${parts[0]!}.${parts[1]!}`), key, Buffer.from(parts[2]!, 'base64url'))
  } catch {
    valid = false
  }
  if (!valid) throw new DpopProofError('dpop_signature', 'the DPoP proof\'s signature does not verify')
  const claims = decodeJson(parts[1]!)
  if (claims === undefined) throw new DpopProofError('dpop_malformed', 'the DPoP proof\'s payload is not a JSON object')
  const jti = claims.jti
  if (typeof jti !== 'string' || jti.length === 0 || jti.length > 256) throw new DpopProofError('dpop_jti', 'the DPoP proof needs a jti')
  if (claims.htm !== expected.method) throw new DpopProofError('dpop_htm', 'the DPoP proof is for another HTTP method')
  const htu = typeof claims.htu === 'string' ? htuOf(claims.htu) : undefined
  if (htu === undefined || htu !== htuOf(expected.url)) throw new DpopProofError('dpop_htu', 'the DPoP proof is for another URL')
  const iat = claims.iat
  if (typeof iat !== 'number' || !Number.isFinite(iat)) throw new DpopProofError('dpop_iat', 'the DPoP proof needs an iat')
  if (iat > nowSeconds + settings.clockSkewSeconds || iat < nowSeconds - settings.maxAgeSeconds - settings.clockSkewSeconds) {
    throw new DpopProofError('dpop_iat', 'the DPoP proof is too old or from the future')
  }
  if (expected.accessToken !== undefined) {
    if (typeof claims.ath !== 'string') throw new DpopProofError('dpop_ath', 'the DPoP proof needs ath, the access token\'s hash')
    if (claims.ath !== accessTokenHash(expected.accessToken)) throw new DpopProofError('dpop_ath', 'the DPoP proof is for another access token')
  }
  if (expected.nonceValid !== undefined) {
    const nonce = claims.nonce
    if (typeof nonce !== 'string' || !expected.nonceValid(nonce)) {
      throw new DpopProofError('dpop_nonce', 'the DPoP proof needs a fresh nonce from this server', true)
    }
  }
  return { jkt, jti, iat }
}
