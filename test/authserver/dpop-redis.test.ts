/**
 * DPoP (RFC 9449 §11.1) at the token endpoint of several instances on one Redis (issue 20): a proof is single
 * use across them (one SET NX per proof under the store's prefix), a public client's bound family refreshes at
 * either, and a Redis that cannot answer makes /token say 503 temporarily_unavailable, never 500. Without
 * REDIS_URL the shared-Redis cases are reported as skipped; the outage case runs on a private redis-server.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { exportJWK, SignJWT } from 'jose'
import * as oauth from 'oauth4webapi'
import { describe, expect, it, onTestFinished } from 'vitest'
import { TemporarilyUnavailable } from '../../src/errors/oauth-errors.js'
import { approveDeviceCode, createDeviceCode } from '../../src/authserver/device.js'
import { ALICE, basic, postForm, type OAuthResponse } from '../support/authserver.js'
import { startAuthServerGateway, startGateway, type RunningGateway } from '../support/gateway.js'
import { deleteKeys, keysUnder, redisServerInstalled, startPrivateRedis } from '../support/redis.js'
import { closedPort } from '../support/upstream.js'

const REDIS_URL = process.env.REDIS_URL
const insecure = { [oauth.allowInsecureRequests]: true } as const
const NO_SERVER = !redisServerInstalled() && process.env.CI !== 'true'
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
const CLIENTS = [{ ...SVC, grant_types: ['client_credentials'], scopes: ['orders:read'] }]
const TV = { client_id: 'tv', token_endpoint_auth_method: 'none', grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
  scopes: ['orders:read'] }

/** A proof for a POST to `tokenEndpoint`, signed now with `key` (a fresh one by default). */
async function proofFor(tokenEndpoint: string, key?: oauth.CryptoKeyPair): Promise<string> {
  key ??= await oauth.generateKeyPair('ES256')
  return new SignJWT({ jti: randomUUID(), htm: 'POST', htu: tokenEndpoint, iat: Math.floor(Date.now() / 1000) })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: await exportJWK(key.publicKey) })
    .sign(key.privateKey)
}

function clientCredentials(gateway: RunningGateway, proof: string): Promise<OAuthResponse> {
  return postForm(gateway, '/token', { grant_type: 'client_credentials' }, { authorization: basic(SVC.client_id, SVC.client_secret), dpop: proof })
}

describe.skipIf(REDIS_URL === undefined)(`DPoP proofs on two instances sharing Redis${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  async function pair(): Promise<{ a: RunningGateway; b: RunningGateway; issuer: string; prefix: string }> {
    const prefix = `{portcullis-dpop-${randomUUID()}}:`
    const [portA, portB] = [await closedPort(), await closedPort()]
    const issuer = `http://127.0.0.1:${portA}`
    const config = {
      upstreams: { echo: { url: 'builtin:echo' } },
      routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
      log: { level: 'warn' },
      authorization_server: {
        enabled: true, issuer, store: { type: 'redis', url: REDIS_URL, prefix }, clients: [...CLIENTS, TV], users: [ALICE],
      },
    }
    const a = await startGateway(config, { port: portA })
    const b = await startGateway(config, { port: portB })
    onTestFinished(async () => {
      await Promise.all([a.close(), b.close()])
      await deleteKeys(REDIS_URL!, prefix)
    })
    return { a, b, issuer, prefix }
  }

  it('a proof used at instance A is refused at instance B with invalid_dpop_proof', async () => {
    const { a, b, issuer } = await pair()
    const proof = await proofFor(`${issuer}/token`)
    const first = await clientCredentials(a, proof)
    expect([first.status, first.body.token_type]).toEqual([200, 'DPoP'])
    const replayed = await clientCredentials(b, proof)
    expect([replayed.status, replayed.body.error, replayed.body.error_description]).toEqual([400, 'invalid_dpop_proof', 'the DPoP proof has been used before'])
    // Another proof is fine on B (its htu is the shared issuer's token endpoint).
    expect((await clientCredentials(b, await proofFor(`${issuer}/token`))).status).toBe(200)
  })

  it('a public client\'s family bound at A refreshes at B with its key only', async () => {
    const { a, b, issuer } = await pair()
    const ctx = a.app.authServer!.ctx
    const device = await createDeviceCode(ctx, 'tv', ['orders:read'])
    await approveDeviceCode(ctx, device.userCode, { sub: ALICE.username, authTime: Math.floor(Date.now() / 1000) })
    const as = await oauth.processDiscoveryResponse(new URL(issuer), await oauth.discoveryRequest(new URL(issuer), { algorithm: 'oauth2', ...insecure }))
    const tv: oauth.Client = { client_id: 'tv' }
    const key = await oauth.generateKeyPair('ES256')
    const tokens = await oauth.processDeviceCodeResponse(as, tv,
      await oauth.deviceCodeGrantRequest(as, tv, oauth.None(), device.deviceCode, { ...insecure, DPoP: oauth.DPoP(tv, key) }))
    // At B, as a load balancer would send it on: the proof still names the issuer's token endpoint.
    const refreshAtB = (proof: string) => postForm(b, '/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token!, client_id: 'tv' },
      { dpop: proof })
    const refused = await refreshAtB(await proofFor(`${issuer}/token`))
    expect([refused.status, refused.body.error]).toEqual([400, 'invalid_grant'])
    const refreshed = await refreshAtB(await proofFor(`${issuer}/token`, key))
    expect([refreshed.status, refreshed.body.token_type]).toEqual([200, 'DPoP'])
  })

  it('the mark is one key under the store\'s prefix (its hash tag), living the proof\'s window and no longer', async () => {
    const { a, issuer, prefix } = await pair()
    const redis = new Redis(REDIS_URL!, { lazyConnect: true, maxRetriesPerRequest: 1 })
    await redis.connect()
    onTestFinished(() => { redis.disconnect() })
    const before = new Set(await keysUnder(redis, `${prefix}once:`))
    expect((await clientCredentials(a, await proofFor(`${issuer}/token`))).status).toBe(200)
    const added = (await keysUnder(redis, `${prefix}once:`)).filter((key) => !before.has(key))
    expect(added).toHaveLength(1)
    expect(added[0]).toMatch(/^\{portcullis-dpop-[0-9a-f-]+\}:once:dpop:[A-Za-z0-9_-]{43}$/)
    // The default window: max_age 60 s and twice the 5 s skew.
    const ttl = await redis.ttl(added[0]!)
    expect(ttl).toBeGreaterThan(60)
    expect(ttl).toBeLessThanOrEqual(70)
  })
})

describe.skipIf(NO_SERVER)(`DPoP proofs while the Redis store is down${NO_SERVER ? ' (redis-server is not installed)' : ''}`, () => {
  it('answers 503 temporarily_unavailable with Retry-After, never a 500, and takes proofs again once Redis is back', async () => {
    const redis = await startPrivateRedis()
    onTestFinished(() => redis.close())
    const gateway = await startAuthServerGateway({ store: { type: 'redis', url: redis.url }, clients: CLIENTS })
    onTestFinished(() => gateway.close())
    const tokenEndpoint = `${gateway.issuer}/token`
    expect((await clientCredentials(gateway, await proofFor(tokenEndpoint))).status).toBe(200)

    await redis.stop()
    const refused = await clientCredentials(gateway, await proofFor(tokenEndpoint))
    expect([refused.status, refused.body.error], refused.text).toEqual([503, 'temporarily_unavailable'])
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    // The body is the generic one: no stack, no Redis error text.
    expect(refused.body).toStrictEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' })
    // The replay cache itself is what fails closed: a proof it cannot record is never taken as new.
    await expect(gateway.app.authServer!.ctx.dpopReplay.firstUse('jkt', randomUUID(), Math.floor(Date.now() / 1000), 70))
      .rejects.toBeInstanceOf(TemporarilyUnavailable)

    await redis.start()
    const deadline = Date.now() + 5000
    let status = 0
    while (status !== 200 && Date.now() < deadline) {
      status = (await clientCredentials(gateway, await proofFor(tokenEndpoint))).status
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(status).toBe(200)
  })
})
