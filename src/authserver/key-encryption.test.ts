import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { KeyEncryptionError, KeyEncryptionKey, KEK_PATTERN } from './key-encryption.js'

const JWK = { kty: 'EC', crv: 'P-256', x: 'x-coordinate', y: 'y-coordinate', d: 'the-private-scalar' }

describe('KeyEncryptionKey', () => {
  it('seals a private JWK so that no member of it appears in the envelope, and opens it again', () => {
    const kek = KeyEncryptionKey.parse(randomBytes(32).toString('base64'))
    const sealed = kek.seal('kid-1', 'ES256', JWK)
    expect(JSON.stringify(sealed)).not.toMatch(/private-scalar|"d"/)
    expect(sealed).toMatchObject({ v: 1, enc: 'A256GCM', kekId: kek.id })
    expect(Buffer.from(sealed.iv, 'base64url')).toHaveLength(12)
    expect(Buffer.from(sealed.tag, 'base64url')).toHaveLength(16)
    expect(kek.open('kid-1', 'ES256', sealed)).toEqual(JWK)
    // A fresh IV each time: the same key sealed twice gives two ciphertexts.
    expect(kek.seal('kid-1', 'ES256', JWK).ciphertext).not.toBe(sealed.ciphertext)
  })

  it('does not open an envelope moved to another kid or alg, altered, or sealed by another key', () => {
    const kek = KeyEncryptionKey.parse(randomBytes(32).toString('base64url'))
    const sealed = kek.seal('kid-1', 'ES256', JWK)
    expect(() => kek.open('kid-2', 'ES256', sealed)).toThrow(KeyEncryptionError)
    expect(() => kek.open('kid-1', 'RS256', sealed)).toThrow(KeyEncryptionError)
    const flipped = Buffer.from(sealed.ciphertext, 'base64url')
    flipped[0] = flipped[0]! ^ 1
    expect(() => kek.open('kid-1', 'ES256', { ...sealed, ciphertext: flipped.toString('base64url') })).toThrow(/altered/)
    const other = KeyEncryptionKey.parse(randomBytes(32).toString('base64'))
    expect(other.id).not.toBe(kek.id)
    expect(() => other.open('kid-1', 'ES256', sealed)).toThrow(`encrypted with another key (key id ${kek.id})`)
  })

  it('accepts 32 bytes in base64 or base64url, padded or not, and nothing else', () => {
    const bytes = randomBytes(32)
    const ids = [bytes.toString('base64'), bytes.toString('base64').replace(/=$/, ''), bytes.toString('base64url')]
      .map((text) => KeyEncryptionKey.parse(text).id)
    expect(new Set(ids).size).toBe(1)
    for (const bad of [randomBytes(16).toString('base64'), randomBytes(33).toString('base64'), bytes.toString('hex'), `${bytes.toString('base64')}\n`, '']) {
      expect(new RegExp(KEK_PATTERN).test(bad)).toBe(false)
      expect(() => KeyEncryptionKey.parse(bad)).toThrow(KeyEncryptionError)
    }
  })

  it('never shows the key itself: JSON and inspection give its id only', async () => {
    const text = randomBytes(32).toString('base64')
    const kek = KeyEncryptionKey.parse(text)
    const { inspect } = await import('node:util')
    expect(JSON.stringify({ kek })).toBe(`{"kek":{"id":"${kek.id}"}}`)
    expect(inspect(kek, { showHidden: true, depth: 5 })).not.toContain(Buffer.from(text, 'base64').toString('hex').slice(0, 8))
    expect(inspect(kek, { showHidden: true, depth: 5 })).not.toMatch(/Buffer|<Buffer/)
  })
})
