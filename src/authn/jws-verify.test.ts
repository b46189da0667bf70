import { generateKeyPairSync, sign } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { UnusableKey, verifyJwsSignature } from './jws-verify.js'

const input = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEifQ'
const data = Buffer.from(input)

/** A P-256 key pair: the private KeyObject and the public key as WebCrypto imports it for ES256. */
async function p256() {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const verifyKey = await crypto.subtle.importKey('jwk', publicKey.export({ format: 'jwk' }), { name: 'ECDSA', namedCurve: 'P-256' }, false, ['verify'])
  return { privateKey, verifyKey }
}

describe('verifyJwsSignature', () => {
  it('accepts an ES256 signature as R ‖ S, and refuses the same signature DER-encoded or cut short', async () => {
    const { privateKey, verifyKey } = await p256()
    const raw = sign('sha256', data, { key: privateKey, dsaEncoding: 'ieee-p1363' })
    const der = sign('sha256', data, { key: privateKey, dsaEncoding: 'der' })
    expect(verifyJwsSignature('ES256', verifyKey, input, raw)).toBe(true)
    expect(verifyJwsSignature('ES256', verifyKey, `${input}x`, raw)).toBe(false)
    expect(verifyJwsSignature('ES256', verifyKey, input, der)).toBe(false)
    expect(verifyJwsSignature('ES256', verifyKey, input, raw.subarray(0, 63))).toBe(false)
    expect(verifyJwsSignature('ES256', verifyKey, input, Buffer.alloc(0))).toBe(false)
  })

  it('refuses to use a key for an algorithm it was not imported for', async () => {
    const { verifyKey } = await p256()
    for (const alg of ['ES384', 'ES512', 'RS256', 'PS256', 'EdDSA'] as const) {
      expect(() => verifyJwsSignature(alg, verifyKey, input, Buffer.alloc(64)), alg).toThrow(UnusableKey)
    }
    // After a successful use for ES256, the cached conversion still does not serve another algorithm.
    expect(verifyJwsSignature('ES256', verifyKey, input, Buffer.alloc(64))).toBe(false)
    expect(() => verifyJwsSignature('ES384', verifyKey, input, Buffer.alloc(96))).toThrow(UnusableKey)
  })

  it('refuses RSA keys under 2048 bits, RS256 keys of another hash, private keys and anything but a CryptoKey', async () => {
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 })
    const smallKey = await crypto.subtle.importKey('jwk', small.publicKey.export({ format: 'jwk' }), { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, false, ['verify'])
    expect(() => verifyJwsSignature('RS256', smallKey, input, sign('sha256', data, small.privateKey))).toThrow(UnusableKey)
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
    const sha384Key = await crypto.subtle.importKey('jwk', rsa.publicKey.export({ format: 'jwk' }), { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-384' }, false, ['verify'])
    expect(() => verifyJwsSignature('RS256', sha384Key, input, sign('sha256', data, rsa.privateKey))).toThrow(UnusableKey)
    expect(verifyJwsSignature('RS384', sha384Key, input, sign('sha384', data, rsa.privateKey))).toBe(true)
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const privateKey = await crypto.subtle.importKey('jwk', ec.privateKey.export({ format: 'jwk' }), { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign'])
    expect(() => verifyJwsSignature('ES256', privateKey, input, Buffer.alloc(64))).toThrow(UnusableKey)
    expect(() => verifyJwsSignature('ES256', ec.publicKey, input, Buffer.alloc(64))).toThrow(UnusableKey)
    expect(() => verifyJwsSignature('ES256', ec.publicKey.export({ format: 'jwk' }), input, Buffer.alloc(64))).toThrow(UnusableKey)
  })
})
