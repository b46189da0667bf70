import { createHash, generateKeyPairSync, sign as cryptoSign } from 'node:crypto'
import { calculateJwkThumbprint, exportJWK, SignJWT } from 'jose'
import { describe, expect, it } from 'vitest'
import { createNonceIssuer } from './nonce.js'
import { DpopProofError, htuOf, verifyProof, type ProofSettings } from './proof.js'
import { memoryReplayCache } from './replay.js'

const SETTINGS: ProofSettings = { algorithms: ['ES256', 'RS256'], maxAgeSeconds: 60, clockSkewSeconds: 5 }
const NOW = 1_800_000_000
const URL_ = 'https://api.example.com/orders/1'

async function key(type: 'ec' | 'rsa' = 'ec', modulusLength = 2048) {
  const pair = type === 'ec' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('rsa', { modulusLength })
  const jwk = await exportJWK(pair.publicKey)
  return { ...pair, jwk, jkt: await calculateJwkThumbprint(jwk), alg: type === 'ec' ? 'ES256' : 'RS256' }
}

async function sign(of: Awaited<ReturnType<typeof key>>, claims: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT({ jti: 'j-1', iat: NOW, htm: 'GET', htu: URL_, ...claims })
    .setProtectedHeader({ alg: of.alg, typ: 'dpop+jwt', jwk: of.jwk }).sign(of.privateKey)
}

async function reason(proof: string, expected: Parameters<typeof verifyProof>[1] = { method: 'GET', url: URL_ }): Promise<string> {
  try {
    await verifyProof(proof, expected, SETTINGS, NOW)
  } catch (error) {
    expect(error).toBeInstanceOf(DpopProofError)
    return (error as DpopProofError).reason
  }
  return 'accepted'
}

describe('verifyProof', () => {
  it('returns the key thumbprint, jti and iat of a good proof; the same header twice is served from the key cache', async () => {
    const holder = await key()
    expect(await verifyProof(await sign(holder), { method: 'GET', url: URL_ }, SETTINGS, NOW)).toEqual({ jkt: holder.jkt, jti: 'j-1', iat: NOW })
    expect((await verifyProof(await sign(holder, { jti: 'j-2' }), { method: 'GET', url: URL_ }, SETTINGS, NOW)).jti).toBe('j-2')
  })

  it('compares htu as parsed URLs: case of scheme and host, default port, query and fragment do not matter; path does', async () => {
    const holder = await key()
    expect(await reason(await sign(holder, { htu: 'HTTPS://API.example.com:443/orders/1?x=1#f' }))).toBe('accepted')
    expect(await reason(await sign(holder, { htu: 'https://api.example.com/Orders/1' }))).toBe('dpop_htu')
    expect(await reason(await sign(holder, { htu: 'https://api.example.com:8443/orders/1' }))).toBe('dpop_htu')
    expect(await reason(await sign(holder, { htu: 'javascript:alert(1)' }))).toBe('dpop_htu')
    expect(await reason(await sign(holder, { htu: 42 }))).toBe('dpop_htu')
    expect(htuOf('ftp://x/y')).toBeUndefined()
  })

  it('holds iat to the window, on both sides, with the skew', async () => {
    const holder = await key()
    expect(await reason(await sign(holder, { iat: NOW - 65 }))).toBe('accepted')
    expect(await reason(await sign(holder, { iat: NOW - 66 }))).toBe('dpop_iat')
    expect(await reason(await sign(holder, { iat: NOW + 5 }))).toBe('accepted')
    expect(await reason(await sign(holder, { iat: NOW + 6 }))).toBe('dpop_iat')
    expect(await reason(await sign(holder, { iat: '1800000000' }))).toBe('dpop_iat')
  })

  it('needs ath equal to the token\'s hash where a token is presented', async () => {
    const holder = await key()
    const ath = createHash('sha256').update('tok').digest('base64url')
    expect(await reason(await sign(holder, { ath }), { method: 'GET', url: URL_, accessToken: 'tok' })).toBe('accepted')
    expect(await reason(await sign(holder), { method: 'GET', url: URL_, accessToken: 'tok' })).toBe('dpop_ath')
    expect(await reason(await sign(holder, { ath }), { method: 'GET', url: URL_, accessToken: 'tok2' })).toBe('dpop_ath')
  })

  it('refuses a missing or empty jti, another method, a header that is not dpop+jwt, an RSA key under 2048 bits', async () => {
    const holder = await key()
    expect(await reason(await sign(holder, { jti: '' }))).toBe('dpop_jti')
    expect(await reason(await sign(holder, { jti: 'x'.repeat(257) }))).toBe('dpop_jti')
    expect(await reason(await sign(holder, { htm: 'get' }))).toBe('dpop_htm')
    const typ = await new SignJWT({ jti: 'a', iat: NOW, htm: 'GET', htu: URL_ }).setProtectedHeader({ alg: 'ES256', typ: 'JWT', jwk: holder.jwk }).sign(holder.privateKey)
    expect(await reason(typ)).toBe('dpop_typ')
    // jose will not sign with it: signed by hand.
    const small = await key('rsa', 1024)
    const input = [{ alg: 'RS256', typ: 'dpop+jwt', jwk: small.jwk }, { jti: 'a', iat: NOW, htm: 'GET', htu: URL_ }]
      .map((part) => Buffer.from(JSON.stringify(part)).toString('base64url')).join('.')
    expect(await reason(`${input}.${cryptoSign('sha256', Buffer.from(input), small.privateKey).toString('base64url')}`)).toBe('dpop_jwk')
  })

  it('refuses an alg outside the settings even when the key was cached under another setting', async () => {
    const holder = await key()
    const proof = await sign(holder)
    expect(await reason(proof)).toBe('accepted')
    await expect(verifyProof(proof, { method: 'GET', url: URL_ }, { ...SETTINGS, algorithms: ['RS256'] }, NOW)).rejects.toMatchObject({ reason: 'dpop_alg' })
  })

  it('refuses a header jwk that says one key while another signed (the signature is checked against the header key)', async () => {
    const holder = await key()
    const thief = await key()
    const forged = await new SignJWT({ jti: 'a', iat: NOW, htm: 'GET', htu: URL_ }).setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: holder.jwk }).sign(thief.privateKey)
    expect(await reason(forged)).toBe('dpop_signature')
  })

  it('asks for a nonce when the verifier wants one: missing or rejected is use_dpop_nonce', async () => {
    const holder = await key()
    const nonceValid = (nonce: string) => nonce === 'good'
    await expect(verifyProof(await sign(holder), { method: 'GET', url: URL_, nonceValid }, SETTINGS, NOW)).rejects.toMatchObject({ reason: 'dpop_nonce', useNonce: true })
    await expect(verifyProof(await sign(holder, { nonce: 'bad' }), { method: 'GET', url: URL_, nonceValid }, SETTINGS, NOW)).rejects.toMatchObject({ useNonce: true })
    expect((await verifyProof(await sign(holder, { nonce: 'good' }), { method: 'GET', url: URL_, nonceValid }, SETTINGS, NOW)).jkt).toBe(holder.jkt)
  })
})

describe('memoryReplayCache', () => {
  it('accepts a jti once per key', () => {
    const cache = memoryReplayCache(1000)
    expect(cache.firstUse('k1', 'a', NOW, 70)).toBe(true)
    expect(cache.firstUse('k1', 'a', NOW, 70)).toBe(false)
    expect(cache.firstUse('k2', 'a', NOW, 70)).toBe(true)
  })

  it('fails closed when full: once a live entry is evicted, no proof as old as it passes again', () => {
    const cache = memoryReplayCache(2)
    expect(cache.firstUse('k', 'a', NOW, 70)).toBe(true)
    expect(cache.firstUse('k', 'b', NOW + 1, 70)).toBe(true)
    expect(cache.firstUse('k', 'c', NOW + 2, 70)).toBe(true)  // evicts a (iat NOW)
    expect(cache.firstUse('k', 'a', NOW, 70)).toBe(false)      // would be a replay: refused by the floor
    expect(cache.firstUse('k', 'd', NOW, 70)).toBe(false)      // as old as the floor: refused too
    expect(cache.firstUse('k', 'e', NOW + 3, 70)).toBe(true)
  })
})

describe('createNonceIssuer', () => {
  it('accepts its nonce for the current and the next window, then not; another secret\'s or a tampered one never', () => {
    let now = 1_000_000
    const issuer = createNonceIssuer('s'.repeat(32), 60_000, () => now)
    const nonce = issuer.current()
    expect(issuer.valid(nonce)).toBe(true)
    now += 60_000
    expect(issuer.valid(nonce)).toBe(true)
    now += 60_000
    expect(issuer.valid(nonce)).toBe(false)
    const fresh = issuer.current()
    expect(createNonceIssuer('t'.repeat(32), 60_000, () => now).valid(fresh)).toBe(false)
    const tampered = fresh.slice(0, -1) + (fresh.endsWith('A') ? 'B' : 'A')
    expect(issuer.valid(tampered)).toBe(false)
    for (const junk of ['', 'x', 'A'.repeat(30), '!'.repeat(30), fresh + 'A']) expect(issuer.valid(junk)).toBe(false)
    expect(createNonceIssuer('s'.repeat(32), 60_000, () => now).valid(fresh)).toBe(true)
  })
})
