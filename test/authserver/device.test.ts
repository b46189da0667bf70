/**
 * The device flow (RFC 8628; checklist §4, TV-10) through the real gateway and its embedded server on
 * loopback: /device_authorization, the functions the /device page calls (approveDeviceCode,
 * denyDeviceCode) on the running server's context, and the device_code grant at /token. oauth4webapi, a
 * strict client, drives the whole flow once, down to a call through the gateway.
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { approveDeviceCode, denyDeviceCode, findDeviceCode } from '../../src/authserver/device.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { basic, callApi, postForm, type OAuthResponse, type DeviceAuthorization } from '../support/authserver.js'
import { testClock, type Clock } from '../support/clock.js'

type Gateway = RunningGateway & { issuer: string }

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/
/** A public device client that may refresh, as `tv` in the checklist fixture. */
const TV = { client_id: 'tv' }
const TV_2 = { client_id: 'tv-2' }
const KIOSK = { client_id: 'kiosk', client_secret: 'kiosk-secret-0123456789' }
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789' }
/** TV-10: the client of RFC 8628 §3.1. */
const RFC_CLIENT = { client_id: '1406020730' }

const setup = {
  access_token: { audience: ['orders-api'] },
  clients: [
    { ...TV, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes: ['orders:read', 'profile'] },
    { ...TV_2, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT], scopes: ['orders:read'] },
    { ...KIOSK, grant_types: [DEVICE_GRANT], scopes: ['orders:read'] },
    { ...SVC, grant_types: ['client_credentials'], scopes: ['orders:read'] },
    { ...RFC_CLIENT, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT], scopes: ['example_scope'] },
  ],
  users: [{ username: 'alice', password: 'correct horse battery staple' }],
}

async function start(context: TestContext, clock?: Clock, store?: Record<string, unknown>): Promise<Gateway> {
  const gateway = await startAuthServerGateway({ ...setup, ...(store && { store }) }, {}, clock ? { now: clock.now } : {})
  context.onTestFinished(() => gateway.close())
  return gateway
}

const ctxOf = (gateway: Gateway) => gateway.app.authServer!.ctx

function deviceAuthorization(gateway: Gateway, form: Record<string, string> = TV, headers: Record<string, string> = {}): Promise<OAuthResponse> {
  return postForm(gateway, '/device_authorization', form, headers)
}

async function issue(gateway: Gateway, form: Record<string, string> = TV): Promise<DeviceAuthorization> {
  const res = await deviceAuthorization(gateway, form)
  expect(res.status).toBe(200)
  return res.body as unknown as DeviceAuthorization
}

function poll(gateway: Gateway, deviceCode: string, client: Record<string, string> = TV): Promise<OAuthResponse> {
  return postForm(gateway, '/token', { grant_type: DEVICE_GRANT, device_code: deviceCode, ...client })
}

/** What the /device page does once alice has logged in and approved. */
function approve(gateway: Gateway, userCode: string): Promise<boolean> {
  return approveDeviceCode(ctxOf(gateway), userCode, { sub: 'alice', authTime: Math.floor(ctxOf(gateway).now() / 1000) })
}

const refusal = (res: OAuthResponse) => [res.status, res.body.error]

describe('device authorization endpoint', () => {
  it('DA-01 a public client names itself with client_id; a confidential one authenticates with Basic or post', async (context) => {
    const gateway = await start(context)
    expect((await deviceAuthorization(gateway, TV)).status).toBe(200)
    expect((await deviceAuthorization(gateway, {}, { authorization: basic(KIOSK.client_id, KIOSK.client_secret) })).status).toBe(200)
    expect((await deviceAuthorization(gateway, KIOSK)).status).toBe(200)
  })

  it('DA-01 answers 401 invalid_client for an unknown client, a wrong secret, or a confidential client without one', async (context) => {
    const gateway = await start(context)
    const unknown = await deviceAuthorization(gateway, { client_id: 'nobody' })
    expect(refusal(unknown)).toEqual([401, 'invalid_client'])
    expect(unknown.headers.get('www-authenticate')).toBeNull()
    const wrong = await deviceAuthorization(gateway, {}, { authorization: basic(KIOSK.client_id, 'wrong-secret-0123456789') })
    expect(refusal(wrong)).toEqual([401, 'invalid_client'])
    expect(wrong.headers.get('www-authenticate')).toContain('Basic realm=')
    expect(refusal(await deviceAuthorization(gateway, { client_id: KIOSK.client_id }))).toEqual([401, 'invalid_client'])
    expect(refusal(await deviceAuthorization(gateway, {}))).toEqual([401, 'invalid_client'])
  })

  it('DA-01 answers 400 unauthorized_client to a client not registered for the device grant', async (context) => {
    const gateway = await start(context)
    const res = await deviceAuthorization(gateway, {}, { authorization: basic(SVC.client_id, SVC.client_secret) })
    expect(refusal(res)).toEqual([400, 'unauthorized_client'])
    expect(res.headers.get('cache-control')).toBe('no-store')
  })

  it('DA-01 answers 400 invalid_scope to a scope outside the registration or a malformed one', async (context) => {
    const gateway = await start(context)
    expect(refusal(await deviceAuthorization(gateway, { ...TV, scope: 'orders:read orders:write' }))).toEqual([400, 'invalid_scope'])
    expect(refusal(await deviceAuthorization(gateway, { ...TV, scope: 'orders:read  profile' }))).toEqual([400, 'invalid_scope'])
    expect(refusal(await deviceAuthorization(gateway, { ...TV, scope: 'orders"read' }))).toEqual([400, 'invalid_scope'])
  })

  it('DA-01 follows G-05..G-07 and G-11: form bodies only, no repeats, no secrets in the query, POST only', async (context) => {
    const gateway = await start(context)
    const url = `${gateway.url}/device_authorization`
    const json = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(TV) })
    expect(json.status).toBe(400)
    expect((await json.json() as { error: string }).error).toBe('invalid_request')
    const charset = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded;charset=UTF-8' },
      body: 'client_id=tv' })
    expect(charset.status).toBe(200)
    const repeated = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'client_id=tv&scope=orders%3Aread&scope=profile' })
    expect([repeated.status, (await repeated.json() as { error: string }).error]).toEqual([400, 'invalid_request'])
    const inQuery = await postForm(gateway, `/device_authorization?client_secret=${KIOSK.client_secret}`, { client_id: KIOSK.client_id })
    expect(refusal(inQuery)).toEqual([400, 'invalid_request'])
    const get = await fetch(url, { redirect: 'manual' })
    expect(get.status).toBe(405)
    expect(get.headers.get('allow')).toBe('POST')
  })

  it('DA-02 answers device_code, user_code, both verification URIs, expires_in 600 and interval 5, never cached', async (context) => {
    const gateway = await start(context)
    const res = await deviceAuthorization(gateway, { ...TV, scope: 'orders:read' })
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('pragma')).toBe('no-cache')
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    const body = res.body as unknown as DeviceAuthorization
    expect(Object.keys(body).sort()).toEqual(['device_code', 'expires_in', 'interval', 'user_code', 'verification_uri', 'verification_uri_complete'])
    // G-09: 256 bits, base64url after the prefix; the store keeps only its hash.
    expect(body.device_code).toMatch(/^pdc_[A-Za-z0-9_-]{43}$/)
    expect(await ctxOf(gateway).store.find('device_code', body.device_code)).toBeUndefined()
    expect(body.user_code).toMatch(USER_CODE)
    expect(body.verification_uri).toBe(`${gateway.issuer}/device`)
    expect(body.verification_uri_complete).toBe(`${gateway.issuer}/device?user_code=${body.user_code}`)
    expect(body.expires_in).toBe(600)
    expect(body.interval).toBe(5)
    expect(await findDeviceCode(ctxOf(gateway), body.device_code)).toMatchObject({ clientId: 'tv', scope: ['orders:read'], status: 'pending' })
  })

  it('DA-02 without scope, the request is for every scope the client registered', async (context) => {
    const gateway = await start(context)
    const { device_code } = await issue(gateway)
    expect((await findDeviceCode(ctxOf(gateway), device_code))?.scope).toEqual(['orders:read', 'profile'])
  })

  it('DA-03 user codes are 8 base-20 characters shown as XXXX-XXXX, and differ from request to request', async (context) => {
    const gateway = await start(context)
    const issued = await Promise.all(Array.from({ length: 50 }, () => issue(gateway)))
    for (const { user_code } of issued) expect(user_code).toMatch(USER_CODE)
    expect(new Set(issued.map(({ user_code }) => user_code)).size).toBe(50)
    expect(new Set(issued.map(({ device_code }) => device_code)).size).toBe(50)
  })

  it('DA-04 the metadata names the device authorization endpoint and the device_code grant', async (context) => {
    const gateway = await start(context)
    const metadata = await (await fetch(`${gateway.url}/.well-known/oauth-authorization-server`)).json() as Record<string, unknown>
    expect(metadata.device_authorization_endpoint).toBe(`${gateway.issuer}/device_authorization`)
    expect(metadata.grant_types_supported).toContain(DEVICE_GRANT)
  })

  it('TV-10 the RFC 8628 §3.1 request and §3.4 poll, byte for byte, get the §3.2 response shape and authorization_pending', async (context) => {
    const gateway = await start(context)
    const res = await fetch(`${gateway.url}/device_authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'client_id=1406020730&scope=example_scope',
    })
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    const body = await res.json() as DeviceAuthorization
    expect(Object.keys(body).sort()).toEqual(['device_code', 'expires_in', 'interval', 'user_code', 'verification_uri', 'verification_uri_complete'])
    expect(typeof body.device_code).toBe('string')
    expect(body.user_code).toMatch(USER_CODE)
    expect(Number.isInteger(body.expires_in) && Number.isInteger(body.interval)).toBe(true)
    const pollRes = await fetch(`${gateway.url}/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=${body.device_code}&client_id=1406020730`,
    })
    expect([pollRes.status, (await pollRes.json() as { error: string }).error]).toEqual([400, 'authorization_pending'])
  })
})

describe('the functions behind the /device page', () => {
  it('DV-02 approveDeviceCode takes the user code in any case, without its dash, with spaces or punctuation', async (context) => {
    const gateway = await start(context)
    const spell = [(code: string) => code.toLowerCase().replace('-', ' '), (code: string) => code.replace('-', ''),
      (code: string) => code.toLowerCase(), (code: string) => ` ${code.slice(0, 2)}.${code.slice(2).toLowerCase()}\t`]
    for (const spelling of spell) {
      const { device_code, user_code } = await issue(gateway)
      expect(await approve(gateway, spelling(user_code)), spelling(user_code)).toBe(true)
      expect((await poll(gateway, device_code)).status).toBe(200)
    }
  })

  it('DV-03 an unknown, malformed, already used or expired user code applies nothing (false)', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const ctx = ctxOf(gateway)
    expect(await approve(gateway, 'BBBB-BBBB')).toBe(false)
    expect(await approve(gateway, 'hello')).toBe(false)
    expect(await denyDeviceCode(ctx, 'BBBB-BBBB')).toBe(false)
    // DV-05: a user code works only once, whatever the first decision was.
    const approved = await issue(gateway)
    expect(await approve(gateway, approved.user_code)).toBe(true)
    expect(await approve(gateway, approved.user_code)).toBe(false)
    expect(await denyDeviceCode(ctx, approved.user_code)).toBe(false)
    const denied = await issue(gateway)
    expect(await denyDeviceCode(ctx, denied.user_code)).toBe(true)
    expect(await approve(gateway, denied.user_code)).toBe(false)
    const expired = await issue(gateway)
    clock.advance(600_000)
    expect(await approve(gateway, expired.user_code)).toBe(false)
    expect(await denyDeviceCode(ctx, expired.user_code)).toBe(false)
  })
})

describe('device_code grant', () => {
  it('DC-01 a poll without device_code is invalid_request', async (context) => {
    const gateway = await start(context)
    const res = await postForm(gateway, '/token', { grant_type: DEVICE_GRANT, ...TV })
    expect(refusal(res)).toEqual([400, 'invalid_request'])
    // A confidential device client authenticates its polls: without its secret, 401.
    const { device_code } = await issue(gateway, KIOSK)
    expect(refusal(await poll(gateway, device_code, { client_id: KIOSK.client_id }))).toEqual([401, 'invalid_client'])
    expect(refusal(await poll(gateway, device_code, KIOSK))).toEqual([400, 'authorization_pending'])
  })

  it('DC-02 before the user has decided, every poll answers 400 authorization_pending, never cached', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const { device_code } = await issue(gateway)
    for (let i = 0; i < 3; i++) {
      const res = await poll(gateway, device_code)
      expect(refusal(res)).toEqual([400, 'authorization_pending'])
      expect(res.headers.get('cache-control')).toBe('no-store')
      clock.advance(5000)
    }
  })

  it('DC-03 slow_down grows the interval by 5 s, persisted: t=0 pending, t=1 slow_down (10), t=7 slow_down (15), t=40 pending', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const { device_code } = await issue(gateway)
    const interval = async () => (await findDeviceCode(ctxOf(gateway), device_code))?.interval
    const at = async (t: number) => {
      clock.advance(t * 1000 - (clock.now() - t0))
      return refusal(await poll(gateway, device_code))
    }
    const t0 = clock.now()
    expect(await at(0)).toEqual([400, 'authorization_pending'])
    expect(await interval()).toBe(5)
    expect(await at(1)).toEqual([400, 'slow_down'])
    expect(await interval()).toBe(10)
    expect(await at(7)).toEqual([400, 'slow_down'])
    expect(await interval()).toBe(15)
    expect(await at(40)).toEqual([400, 'authorization_pending'])
    expect(await interval()).toBe(15)
    // It stays grown: 12 s after the last poll would have been fine at 5 s, but not at 15 s.
    expect(await at(52)).toEqual([400, 'slow_down'])
    expect(await interval()).toBe(20)
  })

  it('DC-04 a denial answers access_denied; past expires_in, expired_token comes first, pending or not', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const denied = await issue(gateway)
    const pending = await issue(gateway)
    const approved = await issue(gateway)
    expect(await denyDeviceCode(ctxOf(gateway), denied.user_code)).toBe(true)
    expect(refusal(await poll(gateway, denied.device_code))).toEqual([400, 'access_denied'])
    expect(await approve(gateway, approved.user_code)).toBe(true)
    clock.advance(599_000)
    expect(refusal(await poll(gateway, pending.device_code))).toEqual([400, 'authorization_pending'])
    clock.advance(1000)
    for (const code of [pending, denied, approved]) {
      expect(refusal(await poll(gateway, code.device_code))).toEqual([400, 'expired_token'])
    }
  })

  it('DC-05 another client\'s device_code, or an unknown one, is invalid_grant and leaves the owner\'s polling untouched', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const { device_code, user_code } = await issue(gateway)
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'authorization_pending'])
    expect(refusal(await poll(gateway, device_code, TV_2))).toEqual([400, 'invalid_grant'])
    expect(refusal(await poll(gateway, device_code, KIOSK))).toEqual([400, 'invalid_grant'])
    expect(refusal(await poll(gateway, 'pdc_' + 'A'.repeat(43)))).toEqual([400, 'invalid_grant'])
    expect(await approve(gateway, user_code)).toBe(true)
    expect(refusal(await poll(gateway, device_code, TV_2))).toEqual([400, 'invalid_grant'])
    clock.advance(5000)
    expect((await poll(gateway, device_code)).status).toBe(200)
  })

  it('DC-06 an approved code gets a T-04 response once; the next poll is invalid_grant and revokes the grant', async (context) => {
    const gateway = await start(context)
    const { device_code, user_code } = await issue(gateway, { ...TV, scope: 'orders:read' })
    const authTime = Math.floor(Date.now() / 1000)
    expect(await approveDeviceCode(ctxOf(gateway), user_code, { sub: 'alice', authTime })).toBe(true)
    const res = await poll(gateway, device_code)
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.body).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'orders:read' })
    const tokens = res.body as { access_token: string; refresh_token: string }
    expect(tokens.refresh_token).toMatch(/^prt_/)
    expect(decodeJwt(tokens.access_token)).toMatchObject({ sub: 'alice', client_id: 'tv', scope: 'orders:read', auth_time: authTime })
    expect((await callApi(gateway, tokens.access_token)).status).toBe(200)

    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'invalid_grant'])
    expect((await callApi(gateway, tokens.access_token)).status).toBe(401)
    const refreshed = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, ...TV })
    expect(refusal(refreshed)).toEqual([400, 'invalid_grant'])
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'invalid_grant'])
  })

  it('DC-06 of ten parallel polls of an approved code, exactly one gets tokens', async (context) => {
    const gateway = await start(context)
    const { device_code, user_code } = await issue(gateway)
    expect(await approve(gateway, user_code)).toBe(true)
    const results = await Promise.all(Array.from({ length: 10 }, () => poll(gateway, device_code)))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    for (const res of results.filter((res) => res.status !== 200)) expect(refusal(res)).toEqual([400, 'invalid_grant'])
  })

  it('keeps the slow_down interval and single use on the default SQLite store as well (DC-03, DC-06)', async (context) => {
    const clock = testClock()
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-device-'))
    const gateway = await start(context, clock, { type: 'sqlite', path: path.join(dir, 'store.db') })
    const { device_code, user_code } = await issue(gateway)
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'authorization_pending'])
    clock.advance(1000)
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'slow_down'])
    clock.advance(6000)
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'slow_down'])
    expect((await findDeviceCode(ctxOf(gateway), device_code))?.interval).toBe(15)
    expect(await approve(gateway, user_code)).toBe(true)
    expect(await approve(gateway, user_code)).toBe(false)
    const results = await Promise.all(Array.from({ length: 5 }, () => poll(gateway, device_code)))
    expect(results.map((res) => res.status).sort()).toEqual([200, 400, 400, 400, 400])
    expect(refusal(await poll(gateway, device_code))).toEqual([400, 'invalid_grant'])
  })

  it('runs the device flow end to end with oauth4webapi: authorize, approve, poll, call the API through the gateway', async (context) => {
    const gateway = await start(context)
    const insecure = { [oauth.allowInsecureRequests]: true } as const
    const issuer = new URL(gateway.issuer)
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
    const client: oauth.Client = { client_id: TV.client_id }
    const authorization = await oauth.processDeviceAuthorizationResponse(as, client,
      await oauth.deviceAuthorizationRequest(as, client, oauth.None(), { scope: 'orders:read' }, insecure))
    expect(authorization.verification_uri).toBe(`${gateway.issuer}/device`)

    const early = oauth.processDeviceCodeResponse(as, client,
      await oauth.deviceCodeGrantRequest(as, client, oauth.None(), authorization.device_code, insecure))
    await expect(early).rejects.toMatchObject({ error: 'authorization_pending' })

    expect(await approve(gateway, authorization.user_code)).toBe(true)
    const tokens = await oauth.processDeviceCodeResponse(as, client,
      await oauth.deviceCodeGrantRequest(as, client, oauth.None(), authorization.device_code, insecure))
    expect(tokens.token_type).toBe('bearer')
    expect(tokens.refresh_token).toBeDefined()
    const api = await callApi(gateway, tokens.access_token)
    expect(api.status).toBe(200)
    const echoed = await api.json() as { headers: Record<string, string> }
    expect(echoed.headers['x-auth-subject']).toBe('alice')
    expect(echoed.headers['x-auth-client-id']).toBe('tv')
  })
})
