/**
 * Issue 20, DPoP at the gateway (RFC 9449 §7): a token bound to a key (`cnf.jkt`, from a third-party issuer
 * and from introspection) is accepted with the DPoP scheme and a proof from oauth4webapi (a client nobody here
 * wrote), and refused in every way an attacker would try: the proof replayed, for another URL or method, by
 * another key, without `ath`, the bound token sent as Bearer, an unbound token sent as DPoP, a stale nonce.
 * Every refusal asserts the RFC 9449 §7.1 challenge and that nothing reached the upstream.
 */
import { calculateJwkThumbprint, exportJWK, SignJWT, type JWK } from 'jose'
import * as oauth from 'oauth4webapi'
import { createHash, randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { stringify } from 'yaml'
import { runPortcullis } from '../../src/server/run.js'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startIntrospectionServer } from '../support/introspection.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { scrape, valueOf } from '../support/prometheus.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway

const ROUTES = [
  { id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['read'] } },
  { id: 'strict', path: '/strict/**', upstream: 'main', dpop: 'required' },
  { id: 'legacy', path: '/legacy/**', upstream: 'main', dpop: 'off' },
]

beforeAll(async () => {
  [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway(testConfig({ upstream, issuer, routes: ROUTES }))
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

beforeEach(() => { upstream.requests.length = 0 })

interface Holder { keys: Awaited<ReturnType<typeof oauth.generateKeyPair>>; jwk: JWK; jkt: string; handle: oauth.DPoPHandle }

async function holder(): Promise<Holder> {
  const keys = await oauth.generateKeyPair('ES256', { extractable: true })
  const jwk = await exportJWK(keys.publicKey)
  return { keys, jwk, jkt: await calculateJwkThumbprint(jwk), handle: oauth.DPoP({}, keys) }
}

const boundToken = (jkt: string, scope = 'read') => issuer.sign({ scope, cnf: { jkt } })

/** A proof built by hand, for the cases oauth4webapi would never send. */
async function proof(of: Holder, claims: Record<string, unknown>, header: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT({ jti: randomUUID(), iat: Math.floor(Date.now() / 1000), ...claims })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: of.jwk, ...header })
    .sign(of.keys.privateKey)
}

const ath = (token: string) => createHash('sha256').update(token).digest('base64url')

function call(path: string, headers: Record<string, string>, method = 'GET'): Promise<Response> {
  return fetch(`${gateway.url}${path}`, { method, headers })
}

async function expectRefused(res: Response, error: string, status = 401): Promise<void> {
  expect(res.status).toBe(status)
  const challenge = res.headers.get('www-authenticate')!
  expect(challenge).toMatch(/^DPoP realm="test", /)
  expect(challenge).toContain(`error="${error}"`)
  expect(challenge).toContain('algs="ES256 ES384 PS256 RS256 EdDSA Ed25519"')
  expect(((await res.json()) as { error: string }).error).toBe(error)
  expect(upstream.requests).toHaveLength(0)
}

describe('a DPoP-bound token with proofs (oauth4webapi)', () => {
  it('is accepted on every request with a fresh proof; the upstream gets neither the proof nor a way to replay it', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    for (const path of ['/api/a', '/api/b?x=1', '/strict/c']) {
      const res = await oauth.protectedResourceRequest(token, 'GET', new URL(`${gateway.url}${path}`), undefined, undefined, { DPoP: client.handle, ...insecure })
      expect(res.status).toBe(200)
    }
    expect(upstream.requests).toHaveLength(3)
    for (const request of upstream.requests) {
      expect(request.headers.dpop).toBeUndefined()
      expect(request.headers['x-auth-scopes']).toBe('read')
    }
  })

  it('is refused when the same proof comes again (replay)', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    const headers = { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(token) }) }
    expect((await call('/api/x', headers)).status).toBe(200)
    upstream.requests.length = 0
    await expectRefused(await call('/api/x', headers), 'invalid_dpop_proof')
  })

  it('is refused with a proof for another URL, another method, without ath, for another token, or too old', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    const other = await boundToken(client.jkt, 'read other')
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ htm: 'GET', htu: `${gateway.url}/api/other`, ath: ath(token) }, 'another path'],
      [{ htm: 'GET', htu: `https://evil.example/api/x`, ath: ath(token) }, 'another host'],
      [{ htm: 'POST', htu: `${gateway.url}/api/x`, ath: ath(token) }, 'another method'],
      [{ htm: 'GET', htu: `${gateway.url}/api/x` }, 'no ath'],
      [{ htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(other) }, 'ath of another token'],
      [{ htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(token), iat: Math.floor(Date.now() / 1000) - 600 }, 'ten minutes old'],
      [{ htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(token), iat: Math.floor(Date.now() / 1000) + 600 }, 'from the future'],
    ]
    for (const [claims, what] of cases) {
      const res = await call('/api/x', { authorization: `DPoP ${token}`, dpop: await proof(client, claims) })
      expect(res.status, what).toBe(401)
      await expectRefused(res, 'invalid_dpop_proof')
    }
  })

  it('is refused with a proof signed by another key, a private or missing jwk, typ JWT, alg none or HS256, garbage, or two proofs', async () => {
    const client = await holder()
    const thief = await holder()
    const token = await boundToken(client.jkt)
    const claims = { htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(token) }
    const privateJwk = await exportJWK(client.keys.privateKey)
    const none = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'dpop+jwt', jwk: client.jwk })).toString('base64url')}.${Buffer.from(JSON.stringify({ ...claims, jti: 'n', iat: Math.floor(Date.now() / 1000) })).toString('base64url')}.`
    const hs = await new SignJWT({ ...claims, jti: 'h', iat: Math.floor(Date.now() / 1000) })
      .setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: { kty: 'oct', k: 'c2VjcmV0' } as unknown as JWK }).sign(new TextEncoder().encode('secret'))
    const proofs: Array<[string | string[], string]> = [
      [await proof(thief, claims), 'another key'],
      [await proof(client, claims, { jwk: privateJwk }), 'private jwk'],
      [await proof(client, claims, { jwk: undefined }), 'no jwk'],
      [await proof(client, claims, { typ: 'JWT' }), 'typ JWT'],
      [none, 'alg none'],
      [hs, 'HS256'],
      ['not-a-proof', 'garbage'],
      ['a.b.c', 'garbage JWS'],
      ['x'.repeat(9000), 'oversized'],
    ]
    for (const [value, what] of proofs) {
      const res = await call('/api/x', { authorization: `DPoP ${token}`, dpop: value as string })
      expect(res.status, what).toBe(401)
      await expectRefused(res, 'invalid_dpop_proof')
    }
    // Two DPoP headers (RFC 9449 §4.3: exactly one).
    const two = await fetch(`${gateway.url}/api/x`, { headers: [['authorization', `DPoP ${token}`], ['dpop', await proof(client, claims)], ['dpop', await proof(client, claims)]] })
    await expectRefused(two, 'invalid_dpop_proof')
    // No proof at all.
    await expectRefused(await call('/api/x', { authorization: `DPoP ${token}` }), 'invalid_dpop_proof')
  })

  it('logs no proof, key or token, whatever was refused', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    const sent = await proof(client, { htm: 'GET', htu: `${gateway.url}/api/other`, ath: ath(token) })
    gateway.logs.length = 0
    await call('/api/x', { authorization: `DPoP ${token}`, dpop: sent })
    await call('/api/x', { authorization: `Bearer ${token}`, dpop: sent })
    const logged = gateway.logs.join('\n')
    expect(logged).toContain('dpop_htu')
    for (const secret of [...sent.split('.'), token.split('.')[2]!, client.jwk.x!]) expect(logged).not.toContain(secret)
  })

  it('is refused as a Bearer token (RFC 9449 §7.2), whatever the route says', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    for (const path of ['/api/x', '/legacy/x']) await expectRefused(await call(path, { authorization: `Bearer ${token}` }), 'invalid_token')
  })

  it('counts proofs in portcullis_token_validations_total by reason (method dpop), replays included', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-dpop-'))
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, stringify({ ...testConfig({ upstream, issuer, routes: ROUTES }), admin: { listen: '127.0.0.1:0' } }))
    const logStream = new Writable({ write(_chunk, _encoding, callback) { callback() } })
    const running = await runPortcullis(file, { port: 0, adminPort: 0, watch: false, logStream })
    try {
      const url = `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`
      const metrics = `http://127.0.0.1:${(running.admin!.server.address() as AddressInfo).port}/metrics`
      const client = await holder()
      const token = await boundToken(client.jkt)
      const headers = { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu: `${url}/api/m`, ath: ath(token) }) }
      expect((await fetch(`${url}/api/m`, { headers })).status).toBe(200)
      expect((await fetch(`${url}/api/m`, { headers })).status).toBe(401)
      const scraped = await scrape(metrics)
      const count = (result: string, reason: string) =>
        valueOf(scraped, 'portcullis_token_validations_total', { issuer: issuer.issuer, method: 'dpop', result, reason })
      expect([count('valid', 'ok'), count('invalid', 'dpop_replay')]).toEqual([1, 1])
    } finally {
      await running.shutdown()
    }
  })
})

describe('modes', () => {
  it('an unbound token with the DPoP scheme is refused; as Bearer it works where DPoP is allowed', async () => {
    const client = await holder()
    const token = await issuer.sign({ scope: 'read' })
    await expectRefused(await call('/api/x', { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu: `${gateway.url}/api/x`, ath: ath(token) }) }), 'invalid_token')
    expect((await call('/api/x', { authorization: `Bearer ${token}` })).status).toBe(200)
  })

  it('dpop: required refuses Bearer tokens and challenges for DPoP when no token is sent', async () => {
    await expectRefused(await call('/strict/x', { authorization: `Bearer ${await issuer.sign({})}` }), 'invalid_token')
    const anonymous = await call('/strict/x', {})
    expect(anonymous.status).toBe(401)
    expect(anonymous.headers.get('www-authenticate')).toBe('DPoP realm="test", algs="ES256 ES384 PS256 RS256 EdDSA Ed25519"')
    expect(upstream.requests).toHaveLength(0)
  })

  it('dpop: off reads the DPoP scheme as any other scheme: no credentials (401 Bearer challenge)', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    const res = await call('/legacy/x', { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu: `${gateway.url}/legacy/x`, ath: ath(token) }) })
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(upstream.requests).toHaveLength(0)
  })

  it('refuses a token whose cnf it cannot read (it must not become a Bearer token)', async () => {
    for (const cnf of [{ jkt: 'short' }, { jkt: 42 }, 'a string']) {
      const res = await call('/api/x', { authorization: `Bearer ${await issuer.sign({ scope: 'read', cnf })}` })
      expect(res.status).toBe(401)
    }
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('RFC 9728 metadata of a resource (RFC 9449 fields)', () => {
  it('names the proof algorithms unless every route is off, and says bound tokens are required when every route requires them', async () => {
    const base = 'http://127.0.0.1'
    const withResources = await startGateway({ ...testConfig({ upstream, issuer, routes: ROUTES, server: { public_url: base } }), resources: [
      { resource: `${base}/strict`, routes: ['strict'] }, { resource: `${base}/legacy`, routes: ['legacy'] }, { resource: `${base}/api`, routes: ['api'] }] })
    try {
      const doc = async (name: string) => (await fetch(`${withResources.url}/.well-known/oauth-protected-resource/${name}`)).json() as Promise<Record<string, unknown>>
      expect(await doc('strict')).toMatchObject({ dpop_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519'], dpop_bound_access_tokens_required: true })
      const legacy = await doc('legacy')
      expect([legacy.dpop_signing_alg_values_supported, legacy.dpop_bound_access_tokens_required]).toEqual([undefined, undefined])
      const api = await doc('api')
      expect([api.dpop_signing_alg_values_supported !== undefined, api.dpop_bound_access_tokens_required]).toEqual([true, undefined])
    } finally {
      await withResources.close()
    }
  })
})

describe('opaque tokens bound by introspection (cnf.jkt in the answer, RFC 9449 §6.2)', () => {
  it('accepts the DPoP request with the bound key\'s proof, refuses another key and the token as Bearer', async () => {
    const idp = await startIntrospectionServer()
    const config = testConfig({ upstream, issuer, routes: ROUTES })
    const introspecting = await startGateway({ ...config, issuers: [{ issuer: 'https://idp.example.com', audience: ['api'],
      introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, token_prefix: 'op_' } }] })
    try {
      const client = await holder()
      const thief = await holder()
      idp.answers.set('op_bound', { json: { active: true, iss: 'https://idp.example.com', aud: 'api', scope: 'read', token_type: 'DPoP', cnf: { jkt: client.jkt } } })
      const send = async (by: Holder, scheme = 'DPoP') => fetch(`${introspecting.url}/api/i`, {
        headers: { authorization: `${scheme} op_bound`, dpop: await proof(by, { htm: 'GET', htu: `${introspecting.url}/api/i`, ath: ath('op_bound') }) },
      })
      expect((await send(client)).status).toBe(200)
      upstream.requests.length = 0
      await expectRefused(await send(thief), 'invalid_dpop_proof')
      await expectRefused(await send(client, 'Bearer'), 'invalid_token')
    } finally {
      await introspecting.close()
      await idp.close()
    }
  })
})

describe('the URL a proof names', () => {
  it('is never taken from the Host header: a proof made for another server is refused here, whatever Host says', async () => {
    const client = await holder()
    const token = await boundToken(client.jkt)
    const stolen = await proof(client, { htm: 'GET', htu: 'http://api.other.example/api/x', ath: ath(token) })
    const res = await rawRequest(gateway.port, `GET /api/x HTTP/1.1\r\nHost: api.other.example\r\nAuthorization: DPoP ${token}\r\nDPoP: ${stolen}\r\nConnection: close\r\n\r\n`)
    expect(res.status).toBe(401)
    expect(res.headers).toContain('error="invalid_dpop_proof"')
    expect(upstream.requests).toHaveLength(0)
  })

  it('is the gateway\'s public URL when server.public_url is set, not the address it was reached at', async () => {
    const pub = await startGateway(testConfig({ upstream, issuer, routes: ROUTES, server: { public_url: 'https://api.example.com' } }))
    try {
      const client = await holder()
      const token = await boundToken(client.jkt)
      const send = async (htu: string) => fetch(`${pub.url}/api/x?q=1`, {
        headers: { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu, ath: ath(token) }) },
      })
      expect((await send(`${pub.url}/api/x`)).status).toBe(401)
      expect((await send('https://API.example.com:443/api/x?other=query#frag')).status).toBe(200)
      expect(upstream.requests).toHaveLength(1)
    } finally {
      await pub.close()
    }
  })
})

describe('server nonces (dpop.nonce: true)', () => {
  it('asks for a nonce with use_dpop_nonce and DPoP-Nonce; oauth4webapi retries with it and succeeds; a forged nonce is refused', async () => {
    const nonced = await startGateway({ ...testConfig({ upstream, issuer, routes: ROUTES }), dpop: { nonce: true } })
    try {
      const client = await holder()
      const token = await boundToken(client.jkt)
      const url = new URL(`${nonced.url}/api/x`)
      const first = await oauth.protectedResourceRequest(token, 'GET', url, undefined, undefined, { DPoP: client.handle, ...insecure })
        .then(() => undefined, (error: unknown) => error)
      expect(oauth.isDPoPNonceError(first)).toBe(true)
      expect(upstream.requests).toHaveLength(0)
      const retried = await oauth.protectedResourceRequest(token, 'GET', url, undefined, undefined, { DPoP: client.handle, ...insecure })
      expect(retried.status).toBe(200)
      const forged = await fetch(url, { headers: { authorization: `DPoP ${token}`, dpop: await proof(client, { htm: 'GET', htu: url.href, ath: ath(token), nonce: 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }) } })
      expect(forged.status).toBe(401)
      expect(forged.headers.get('www-authenticate')).toContain('error="use_dpop_nonce"')
      expect(forged.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{30}$/)
      expect(upstream.requests).toHaveLength(1)
    } finally {
      await nonced.close()
    }
  })
})
