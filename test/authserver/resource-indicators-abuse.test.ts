/**
 * RFC 8707 resource indicators at the embedded server (issue 18), continued: the device flow (`resource`
 * at /device_authorization, shown on the /device page, narrowed by the poll), client_credentials and
 * password unchanged (resources asked at /token), and abuse: every `resource` that is not a configured
 * identifier is invalid_target at /authorize, /token and /device_authorization alike (RFC 8707 §2: absolute
 * URI, no fragment; exact string comparison, as redirect URIs, A-03, but for the case of scheme and host,
 * issue 19, whose look-alikes are refused too), G-06 for empty values, and many repeated values.
 * test/authserver/resource-indicators.test.ts has the code flow and refresh.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import * as oauth from 'oauth4webapi'
import { approveDeviceCode } from '../../src/authserver/device.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV1, basic, type OAuthResponse } from '../support/authserver.js'
import { FormBrowser, field, responseParams } from '../support/browser.js'
import { twoResources } from '../support/resources.js'
import { closedPort } from '../support/upstream.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const DEFAULT_AUDIENCE = 'https://api.example.com'
const CONF = { client_id: 'conf', client_secret: 'conf-secret-0123456789ab' }
const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abc' }
const APP = { client_id: 'app', client_secret: 'app-secret-0123456789abc' }
const tv: oauth.Client = { client_id: 'tv' }

interface Setup {
  gateway: RunningGateway & { issuer: string }
  as: oauth.AuthorizationServer
  origin: string
  orders: string
  billing: string
}

async function start(context: TestContext): Promise<Setup> {
  const port = await closedPort()
  const origin = `http://127.0.0.1:${port}`
  const { orders, billing, extra } = twoResources(origin)
  const scopes = ['orders:read']
  const gateway = await startAuthServerGateway({
    access_token: { audience: [DEFAULT_AUDIENCE] },
    clients: [
      { ...CONF, grant_types: ['authorization_code'], redirect_uris: [R1], scopes },
      { client_id: tv.client_id, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes },
      { ...SVC, grant_types: ['client_credentials'], scopes },
      { ...APP, grant_types: ['password', 'refresh_token'], first_party: true, scopes },
    ],
    users: [ALICE],
  }, extra, { port })
  context.onTestFinished(() => gateway.close())
  const issuer = new URL(gateway.issuer)
  const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
  return { gateway, as, origin, orders, billing }
}

/** A form POST whose `resource` may repeat (the support helper takes one value per name). */
async function post(t: Setup, path: string, form: Record<string, string>, resources: readonly string[],
  headers: Record<string, string> = {}): Promise<OAuthResponse> {
  const body = new URLSearchParams(form)
  for (const resource of resources) body.append('resource', resource)
  const res = await fetch(`${t.gateway.url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body, redirect: 'manual',
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as Record<string, unknown>, text }
}

const asSvc = { authorization: basic(SVC.client_id, SVC.client_secret) }
const clientCredentials = (t: Setup, resources: readonly string[]) =>
  post(t, '/token', { grant_type: 'client_credentials' }, resources, asSvc)
const deviceAuthorization = (t: Setup, resources: readonly string[]) => post(t, '/device_authorization', { client_id: tv.client_id }, resources)

/** /authorize for CONF, as a browser follows the client's link: the response to it (a redirect, here). */
async function authorize(t: Setup, resources: readonly string[]) {
  const query = new URLSearchParams({
    response_type: 'code', client_id: CONF.client_id, redirect_uri: R1, scope: 'orders:read', state: 'st-1',
    code_challenge: TV1.challenge, code_challenge_method: 'S256',
  })
  for (const resource of resources) query.append('resource', resource)
  return new FormBrowser(t.gateway.url).get(`/authorize?${query}`)
}

/**
 * RFC 8707 §2 and exact matching but for the case of scheme and host: none of these is a configured identifier.
 * Several are what the WHATWG URL parser would turn into one (`%2e`, full-width letters, a tab, a default port).
 */
function abusive(t: Setup): Array<[string, string]> {
  const host = new URL(t.origin).host
  const otherPort = t.orders.replace(/:(\d+)\//, (_match, port: string) => `:${Number(port) + 1}/`)
  return [
    ['a fragment', `${t.orders}#part`],
    ['a bare fragment', '#'],
    ['a relative reference', '/api'],
    ['a network-path reference', `//${host}/api`],
    ['no scheme', `${host}/api`],
    ['a trailing slash', `${t.orders}/`],
    ['upper-case path', t.orders.replace(/\/api$/, '/API')],
    ['upper-case scheme and path', t.orders.replace(/^http:/, 'HTTP:').replace(/\/api$/, '/API')],
    ['upper-case host and a trailing slash', 'HTTPS://API.EXAMPLE.COM/'],
    ['a full-width host', 'https://\uff41\uff50\uff49.example.com'],
    ['a Cyrillic look-alike host', 'https://\u0430pi.example.com'],
    ['a dotted capital I, which lowercases to i and a combining dot', 'HTTPS://AP\u0130.EXAMPLE.COM'],
    ['%2e in the host', 'https://api%2eexample.com'],
    ['%2e as a dot segment', t.orders.replace(/\/api$/, '/%2e/api')],
    ['a trailing dot in the host', 'https://api.example.com.'],
    ['a trailing dot in an upper-case host', 'HTTPS://API.EXAMPLE.COM.'],
    ['the default port written out', 'https://api.example.com:443'],
    ['another port', otherPort],
    ['user information', 'https://user@api.example.com'],
    ['user information before an upper-case host', 'HTTPS://evil.example@API.EXAMPLE.COM'],
    ['a tab in the host', 'https://api.exam\tple.com'],
    ['backslashes for slashes', 'https:\\\\API.EXAMPLE.COM'],
    ['an upper-case host with a fragment', 'HTTPS://API.EXAMPLE.COM#x'],
    ['localhost for 127.0.0.1', t.orders.replace('127.0.0.1', 'localhost')],
    ['a dot segment', `${t.orders}/.`],
    ['percent-encoding', t.orders.replace(/\/api$/, '/%61pi')],
    ['a leading space', ` ${t.orders}`],
    ['a query', `${t.orders}?tenant=a`],
    ['an unconfigured resource', 'https://evil.example/api'],
  ]
}

const refusal = (res: OAuthResponse) => [res.status, res.body.error]

describe('resource values that are not exactly a configured identifier', () => {
  it('are invalid_target at /token, /device_authorization and /authorize (redirected with state and iss)', async (context) => {
    const t = await start(context)
    for (const [what, value] of abusive(t)) {
      expect(refusal(await clientCredentials(t, [value])), what).toEqual([400, 'invalid_target'])
      expect(refusal(await clientCredentials(t, [t.orders, value])), what).toEqual([400, 'invalid_target'])
      expect(refusal(await deviceAuthorization(t, [value])), what).toEqual([400, 'invalid_target'])
      const res = await authorize(t, [t.orders, value])
      expect(res.status, what).toBe(302)
      const params = responseParams(res.location)
      expect([params.get('error'), params.get('state'), params.get('iss')], what).toEqual(['invalid_target', 'st-1', t.gateway.issuer])
    }
  })

  it('an empty value counts as omitted (G-06): the default audience, or the other values\'', async (context) => {
    const t = await start(context)
    const none = await clientCredentials(t, [''])
    expect(decodeJwt(none.body.access_token as string).aud).toBe(DEFAULT_AUDIENCE)
    const one = await clientCredentials(t, ['', t.billing, ''])
    expect(decodeJwt(one.body.access_token as string).aud).toBe(t.billing)
    expect((await deviceAuthorization(t, [''])).status).toBe(200)
    expect((await authorize(t, [''])).location).toContain('/login?interaction=')
  })

  it('50 repeated values are one resource; 50 unknown ones are invalid_target, and the answer echoes none of them', async (context) => {
    const t = await start(context)
    const repeated = Array.from({ length: 50 }, () => t.orders)
    const res = await clientCredentials(t, repeated)
    expect(decodeJwt(res.body.access_token as string).aud).toBe(t.orders)
    expect((await deviceAuthorization(t, repeated)).status).toBe(200)
    expect((await authorize(t, repeated)).location).toContain('/login?interaction=')
    const unknown = Array.from({ length: 50 }, (_, i) => `https://evil.example/${i}`)
    const refused = await clientCredentials(t, unknown)
    expect(refusal(refused)).toEqual([400, 'invalid_target'])
    expect(refused.text).not.toContain('evil.example')
    const redirected = await authorize(t, [...repeated, ...unknown])
    expect(responseParams(redirected.location).get('error')).toBe('invalid_target')
    expect(redirected.location).not.toContain('evil.example')
  })
})

describe('resource values whose scheme or host differ only in case (MCP 2026-07-28, Canonical Server URI)', () => {
  const upperOrders = (t: Setup) => t.orders.replace(/^http:/, 'HTTP:')

  it('name the configured identifier: aud is always its configured spelling, and differently cased values count once', async (context) => {
    const t = await start(context)
    const aud = async (resources: string[]) => decodeJwt((await clientCredentials(t, resources)).body.access_token as string).aud
    expect(await aud(['HTTPS://API.EXAMPLE.COM'])).toBe(DEFAULT_AUDIENCE)
    expect(await aud(['hTtPs://Api.Example.Com', upperOrders(t)])).toEqual([DEFAULT_AUDIENCE, t.orders])
    expect(await aud([DEFAULT_AUDIENCE, 'HTTPS://API.EXAMPLE.COM', 'https://API.example.com'])).toBe(DEFAULT_AUDIENCE)
  })

  it('at /authorize the grant and the consent page have the configured spelling', async (context) => {
    const t = await start(context)
    const res = await authorize(t, [upperOrders(t)])
    expect(res.location).toContain('/login?interaction=')
    const browser = new FormBrowser(t.gateway.url)
    const login = await browser.get(res.location!)
    const consent = await browser.get((await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })).location!)
    expect(consent.text).toContain(`<strong>${t.orders}</strong>`)
    expect(consent.text).not.toContain('HTTP:')
  })

  it('a device grant named in upper case is narrowed by a poll in another case, and its tokens carry the configured spelling', async (context) => {
    const t = await start(context)
    const device = (await deviceAuthorization(t, [upperOrders(t), 'HTTPS://API.EXAMPLE.COM'])).body as { device_code: string; user_code: string }
    const ctx = t.gateway.app.authServer!.ctx
    expect(await approveDeviceCode(ctx, device.user_code, { sub: 'alice', authTime: Math.floor(ctx.now() / 1000) })).toBe(true)
    const poll = (resources: string[]) => post(t, '/token', { grant_type: DEVICE_GRANT, device_code: device.device_code, client_id: tv.client_id }, resources)
    // Configured, but not granted: as outside the grant in any case as in its own.
    expect(refusal(await poll([t.billing.replace(/^http:/, 'HTTP:')]))).toEqual([400, 'invalid_target'])
    expect(decodeJwt((await poll(['https://Api.Example.com'])).body.access_token as string).aud).toBe(DEFAULT_AUDIENCE)
  })
})

describe('device flow with resource', () => {
  it('stores the resources with the device code, shows them on /device, and the poll may narrow but not widen them', async (context) => {
    const t = await start(context)
    const device = await oauth.processDeviceAuthorizationResponse(t.as, tv, await oauth.deviceAuthorizationRequest(t.as, tv, oauth.None(),
      [['scope', 'orders:read'], ['resource', t.orders], ['resource', t.billing]], insecure))

    // alice approves on the /device page, which names the resources.
    const browser = new FormBrowser(t.gateway.url)
    const login = await browser.get('/device')
    const entry = await browser.get((await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })).location!)
    const confirm = await browser.post('/device', { _csrf: field(entry, '_csrf'), user_code: device.user_code })
    expect(confirm.text).toContain(t.orders)
    expect(confirm.text).toContain(t.billing)
    expect((await browser.post('/device', { _csrf: field(confirm, '_csrf'), user_code: device.user_code, decision: 'approve' })).status).toBe(200)

    const poll = async (resources: string[]) => oauth.processDeviceCodeResponse(t.as, tv, await oauth.deviceCodeGrantRequest(t.as, tv, oauth.None(),
      device.device_code, { ...insecure, additionalParameters: resources.map((resource) => ['resource', resource]) }))
    const widened = await poll([t.orders, DEFAULT_AUDIENCE]).catch((error: unknown) => error)
    expect(widened).toMatchObject({ status: 400, error: 'invalid_target' })
    const tokens = await poll([t.billing])
    expect(decodeJwt(tokens.access_token).aud).toBe(t.billing)
    // The refresh token has the device grant's two resources.
    const refreshed = await oauth.processRefreshTokenResponse(t.as, tv,
      await oauth.refreshTokenGrantRequest(t.as, tv, oauth.None(), tokens.refresh_token!, insecure))
    expect(decodeJwt(refreshed.access_token).aud).toEqual([t.orders, t.billing])
  })

  it('a device code asked without resource is for the default audience, which the poll cannot widen', async (context) => {
    const t = await start(context)
    const device = (await deviceAuthorization(t, [])).body as { device_code: string; user_code: string }
    const ctx = t.gateway.app.authServer!.ctx
    expect(await approveDeviceCode(ctx, device.user_code, { sub: 'alice', authTime: Math.floor(ctx.now() / 1000) })).toBe(true)
    const poll = (resources: string[]) => post(t, '/token', { grant_type: DEVICE_GRANT, device_code: device.device_code, client_id: tv.client_id }, resources)
    expect(refusal(await poll([t.orders]))).toEqual([400, 'invalid_target'])
    expect(decodeJwt((await poll([])).body.access_token as string).aud).toBe(DEFAULT_AUDIENCE)
  })
})

describe('client_credentials and password: resources asked at /token, as before', () => {
  it('client_credentials gets any configured resource, or the default audience', async (context) => {
    const t = await start(context)
    expect(decodeJwt((await clientCredentials(t, [t.orders, t.billing])).body.access_token as string).aud).toEqual([t.orders, t.billing])
    expect(decodeJwt((await clientCredentials(t, [])).body.access_token as string).aud).toBe(DEFAULT_AUDIENCE)
  })

  it('password: the grant is for the resources asked at /token, and its refreshes stay within them', async (context) => {
    const t = await start(context)
    const form = { grant_type: 'password', ...ALICE, ...APP }
    const tokens = await post(t, '/token', form, [t.orders])
    expect(decodeJwt(tokens.body.access_token as string).aud).toBe(t.orders)
    const refresh = (resources: string[]) =>
      post(t, '/token', { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token as string, ...APP }, resources)
    expect(refusal(await refresh([t.billing]))).toEqual([400, 'invalid_target'])
    const refreshed = await refresh([])
    expect(decodeJwt(refreshed.body.access_token as string).aud).toBe(t.orders)
  })
})
