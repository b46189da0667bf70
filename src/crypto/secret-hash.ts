/**
 * Secret and password hashes as printed by `portcullis hash-secret`:
 * `scrypt$<log2 N>$<r>$<p>$<salt base64url>$<hash base64url>`, compared in constant time.
 */
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto'

const KEY_LENGTH = 32

function derive(secret: string, salt: Buffer, logN: number, r: number, p: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(secret, salt, KEY_LENGTH, { N: 2 ** logN, r, p, maxmem: 256 * 1024 * 1024 }, (error, key) =>
      (error ? reject(error) : resolve(key)))
  })
}

export async function hashSecret(secret: string): Promise<string> {
  const logN = 15, r = 8, p = 1
  const salt = randomBytes(16)
  const key = await derive(secret, salt, logN, r, p)
  return `scrypt$${logN}$${r}$${p}$${salt.toString('base64url')}$${key.toString('base64url')}`
}

const FORMAT = /^scrypt\$([0-9]{1,2})\$([0-9]{1,2})\$([0-9]{1,2})\$([A-Za-z0-9_-]{16,})\$([A-Za-z0-9_-]{43})$/

export function isSecretHash(value: string): boolean {
  return FORMAT.test(value)
}

export async function verifySecret(secret: string, hash: string): Promise<boolean> {
  const match = FORMAT.exec(hash)
  if (!match) return false
  const expected = Buffer.from(match[5]!, 'base64url')
  const actual = await derive(secret, Buffer.from(match[4]!, 'base64url'), Number(match[1]), Number(match[2]), Number(match[3]))
  return timingSafeEqual(actual, expected)
}
