/** New signing keys: one key pair per algorithm, named by its RFC 7638 thumbprint. */
import { calculateJwkThumbprint, exportJWK, generateKeyPair } from 'jose'
import type { SigningAlgorithm } from '../../common/token-formats.js'
import type { NewKey } from './stored-key.js'

/** A fresh key pair of `alg` (RSA: 2048 bits), not written anywhere yet. */
export async function generateKey(alg: SigningAlgorithm, generation: number): Promise<NewKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true, modulusLength: 2048 })
  const publicJwk = await exportJWK(publicKey)
  // RFC 7638 thumbprint: unique per key, and anyone holding the JWKS can recompute it.
  const kid = await calculateJwkThumbprint(publicJwk, 'sha256')
  return { kid, alg, generation, publicJwk, privateJwk: await exportJWK(privateKey) }
}
