/**
 * Issue 20, DPoP proofs single use across instances (RFC 9449 §11.1): two `portcullis start` processes share
 * one Redis (the embedded server's store) and one public URL; a proof accepted by one is refused by the other.
 * Without REDIS_URL the suite is reported as skipped.
 */
import { calculateJwkThumbprint, exportJWK, SignJWT } from 'jose'
import { createHash, generateKeyPairSync, randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startInstancePair, type InstancePair } from '../support/instances.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'

const REDIS_URL = process.env.REDIS_URL
const PUBLIC = 'https://api.example.com'

describe.skipIf(REDIS_URL === undefined)(`DPoP proofs on two instances sharing one Redis${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  let issuer: TestIssuer
  let pair: InstancePair

  beforeAll(async () => {
    issuer = await startTestIssuer()
    pair = await startInstancePair({
      redisUrl: REDIS_URL!, prefix: `{portcullis-test-${randomUUID()}}:`,
      extra: {
        server: { public_url: PUBLIC },
        issuers: [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }],
      },
    })
  }, 60_000)

  afterAll(async () => {
    await pair?.close()
    await issuer?.close()
  })

  it('refuses on instance B a proof instance A accepted, and a fresh one works on B', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const jwk = await exportJWK(publicKey)
    const token = await issuer.sign({ scope: 'read', cnf: { jkt: await calculateJwkThumbprint(jwk) } })
    const proof = () => new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), htm: 'GET', htu: `${PUBLIC}/api/x`,
      ath: createHash('sha256').update(token).digest('base64url') }).setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk }).sign(privateKey)
    const send = (base: string, dpop: string) => fetch(`${base}/api/x`, { headers: { authorization: `DPoP ${token}`, dpop } })
    const once = await proof()
    expect((await send(pair.a.url, once)).status).toBe(200)
    const replayed = await send(pair.b.url, once)
    expect(replayed.status).toBe(401)
    expect(replayed.headers.get('www-authenticate')).toContain('error="invalid_dpop_proof"')
    expect((await send(pair.a.url, once)).status).toBe(401)
    expect((await send(pair.b.url, await proof())).status).toBe(200)
  }, 30_000)
})
