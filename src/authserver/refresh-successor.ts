/**
 * The reuse grace of refresh rotation (grants/refresh-token.ts): a rotation's response, kept for the grace
 * only, sealed under the rotated-out refresh token itself. The store holds that token's SHA-256, never the
 * token, so neither the store nor a copy of it can open the seal: only a request presenting the token can.
 * AES-256-GCM under a key derived from the token by HKDF-SHA-256; the request's scope and audience are the
 * associated data, so the seal opens only for the same request.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto'
import type { TokenResponseBody } from './tokens.js'

const INFO = 'portcullis refresh successor v1'
const IV_BYTES = 12
const TAG_BYTES = 16

function keyOf(refreshToken: string): Buffer {
  return Buffer.from(hkdfSync('sha256', refreshToken, Buffer.alloc(0), INFO, 32))
}

/**
 * What a replay must repeat to get the same response: the scope and audience the rotation was asked for,
 * and the DPoP key its access token is bound to, if any (a replay with another key gets nothing it could use).
 */
export function requestBinding(scope: readonly string[], audience: readonly string[], jkt?: string): Buffer {
  return Buffer.from(JSON.stringify(jkt === undefined ? [scope, audience] : [scope, audience, jkt]))
}

/** base64url of iv, tag and ciphertext. */
export function sealSuccessor(refreshToken: string, binding: Buffer, body: TokenResponseBody): string {
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv('aes-256-gcm', keyOf(refreshToken), iv).setAAD(binding)
  const sealed = Buffer.concat([cipher.update(JSON.stringify(body), 'utf8'), cipher.final()])
  return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url')
}

/** The sealed response, or undefined when another token or another request presents it (or it is damaged). */
export function openSuccessor(refreshToken: string, binding: Buffer, sealed: string): TokenResponseBody | undefined {
  try {
    const bytes = Buffer.from(sealed, 'base64url')
    const decipher = createDecipheriv('aes-256-gcm', keyOf(refreshToken), bytes.subarray(0, IV_BYTES)).setAAD(binding)
    decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
    const text = Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8')
    return JSON.parse(text) as TokenResponseBody
  } catch {
    return undefined
  }
}
