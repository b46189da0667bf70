/**
 * Server-provided DPoP nonces (RFC 9449 §8, §9): stateless, so any instance that shares the secret accepts
 * any instance's nonce with no store round trip. A nonce names a time window and carries an HMAC of it; the
 * current window's and the previous one's are accepted, so a nonce lives between one and two lifetimes.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'

export interface NonceIssuer {
  /** The nonce to send now (`DPoP-Nonce`). */
  current(): string
  /** Whether `nonce` is one of this secret's for the current or the previous window. */
  valid(nonce: string): boolean
}

const MAC_BYTES = 16

/**
 * The key when `dpop.nonce_secret` is not set: one per process, kept across reloads, or under `server.workers`
 * the one the primary made at start and handed every worker (useSharedNonceKey), so that they accept each other's.
 */
let defaultKey: Buffer | undefined

export function useSharedNonceKey(key: Buffer): void {
  defaultKey = key
}

/**
 * @param secret shared by every instance (`dpop.nonce_secret`); the process's (or the workers' shared) key when undefined
 * @param lifetimeMs one window
 */
export function createNonceIssuer(secret: string | undefined, lifetimeMs: number, nowMs: () => number = Date.now): NonceIssuer {
  const key = secret === undefined ? (defaultKey ??= randomBytes(32)) : Buffer.from(secret, 'utf8')
  const mac = (window: number) => createHmac('sha256', key).update(`dpop-nonce.${window}`).digest().subarray(0, MAC_BYTES)
  const encode = (window: number) => {
    const bytes = Buffer.alloc(6 + MAC_BYTES)
    bytes.writeUIntBE(window, 0, 6)
    mac(window).copy(bytes, 6)
    return bytes.toString('base64url')
  }
  let cached = { window: -1, nonce: '' }
  return {
    current() {
      const window = Math.floor(nowMs() / lifetimeMs)
      if (cached.window !== window) cached = { window, nonce: encode(window) }
      return cached.nonce
    },
    valid(nonce) {
      if (nonce.length !== Math.ceil(((6 + MAC_BYTES) * 4) / 3) || !/^[A-Za-z0-9_-]+$/.test(nonce)) return false
      const bytes = Buffer.from(nonce, 'base64url')
      if (bytes.length !== 6 + MAC_BYTES) return false
      const window = bytes.readUIntBE(0, 6)
      const now = Math.floor(nowMs() / lifetimeMs)
      if (window !== now && window !== now - 1) return false
      return timingSafeEqual(bytes.subarray(6), mac(window))
    },
  }
}
