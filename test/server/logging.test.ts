/**
 * Issue 6 item 3: what the logs never carry. Every flow of the embedded server runs against the real gateway
 * (client credentials with Basic, the password grant, code + PKCE through the pages, refresh, revoke,
 * introspect, the device flow, tokens in the query, a wrong secret), every credential sent or issued is
 * collected, and then the captured request log and the audit file are searched for each of them.
 */
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loggableUrl } from '../../src/server/gateway.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV1, basic, postForm, type OAuthResponse } from '../support/authserver.js'
import { FormBrowser, field, loginAndConsent, responseParams } from '../support/browser.js'

type Gateway = RunningGateway & { issuer: string }

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const MACHINE = { client_id: 'machine', client_secret: 'machine-secret-4f1e9a7c2b' }
const APP = { client_id: 'app', client_secret: 'app-secret-8d3c6b0e5f' }
const WRONG_SECRET = 'machine-secret-typo-77aa31'
const WRONG_PASSWORD = 'incorrect horse battery stapler'

interface LogLine {
  msg?: string
  reqId?: string
  route?: string
  decision?: string
  status?: number
  ms?: number
  [field: string]: unknown
}

describe('secrets never reach the request log or the audit trail', () => {
  let gateway: Gateway
  let auditFile: string
  /** Every credential the flows sent or received. */
  const secrets = new Map<string, string>()
  /** The request ids of the proxied calls, with the outcome each should have logged. */
  const proxied: Array<{ id: string; msg: string; status: number }> = []

  const keep = (what: string, value: unknown) => {
    expect(typeof value, what).toBe('string')
    secrets.set(what, value as string)
    return value as string
  }
  const tokensOf = (what: string, res: OAuthResponse) => {
    expect(res.status, `${what}: ${res.text}`).toBe(200)
    for (const name of ['access_token', 'refresh_token', 'id_token']) {
      if (res.body[name] !== undefined) keep(`${what} ${name}`, res.body[name])
    }
    return res.body as { access_token: string; refresh_token?: string }
  }
  /** A call through the proxy with a request id of its own, so its log line can be found. */
  const callApi = async (token: string, expected: { msg: string; status: number }, query = '') => {
    const id = randomUUID()
    const res = await fetch(`${gateway.url}/api/orders${query}`, {
      headers: { 'x-request-id': id, ...(query === '' && { authorization: `Bearer ${token}` }) },
    })
    await res.arrayBuffer()
    expect(res.status).toBe(expected.status)
    proxied.push({ id, ...expected })
  }

  beforeAll(async () => {
    auditFile = path.join(mkdtempSync(path.join(tmpdir(), 'portcullis-audit-')), 'audit.log')
    gateway = await startAuthServerGateway({
      access_token: { audience: ['orders-api'] },
      clients: [
        { ...MACHINE, grant_types: ['client_credentials'], scopes: ['orders:read'] },
        { ...APP, token_endpoint_auth_method: 'client_secret_post', grant_types: ['password', 'refresh_token'], first_party: true,
          scopes: ['orders:read', 'openid'] },
        { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'],
          redirect_uris: [R1], scopes: ['openid', 'orders:read'] },
        { client_id: 'tv', token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes: ['orders:read'] },
      ],
      users: [ALICE],
    }, { audit: { output: auditFile } })
    keep('machine secret', MACHINE.client_secret)
    keep('app secret', APP.client_secret)
    keep('wrong secret', WRONG_SECRET)
    keep('password', ALICE.password)
    keep('wrong password', WRONG_PASSWORD)
    keep('PKCE verifier', TV1.verifier)

    // client_credentials with client_secret_basic, and a wrong secret the same way.
    const authorization = keep('Basic credentials', basic(MACHINE.client_id, MACHINE.client_secret).slice('Basic '.length))
    const machine = tokensOf('client_credentials', await postForm(gateway, '/token', { grant_type: 'client_credentials' },
      { authorization: `Basic ${authorization}` }))
    const wrong = await postForm(gateway, '/token', { grant_type: 'client_credentials' },
      { authorization: basic(MACHINE.client_id, WRONG_SECRET) })
    expect(wrong.status).toBe(401)
    keep('wrong Basic credentials', basic(MACHINE.client_id, WRONG_SECRET).slice('Basic '.length))

    // The password grant (client_secret_post), a wrong password, then a refresh.
    const password = tokensOf('password', await postForm(gateway, '/token', { grant_type: 'password', ...ALICE, ...APP, scope: 'orders:read openid' }))
    expect((await postForm(gateway, '/token', { grant_type: 'password', username: ALICE.username, password: WRONG_PASSWORD, ...APP })).status).toBe(400)
    const refreshed = tokensOf('refresh', await postForm(gateway, '/token', {
      grant_type: 'refresh_token', refresh_token: password.refresh_token!, ...APP,
    }))

    // Authorization code + PKCE through the pages: a wrong password typed first, then the right one.
    const browser = new FormBrowser(gateway.url)
    const query = new URLSearchParams({
      response_type: 'code', client_id: 'spa', redirect_uri: R1, scope: 'openid orders:read', state: 'state-5b1f0c9e27',
      nonce: 'nonce-0d8e4a6c31', code_challenge: TV1.challenge, code_challenge_method: 'S256',
    })
    const start = await browser.get(`/authorize?${query}`)
    const loginPage = await browser.get(start.location!)
    keep('CSRF token', field(loginPage, '_csrf'))
    const refused = await browser.post('/login', { _csrf: field(loginPage, '_csrf'), interaction: field(loginPage, 'interaction'),
      username: ALICE.username, password: WRONG_PASSWORD })
    expect(refused.status).toBe(401)
    const done = await loginAndConsent(browser, refused, ALICE)
    const code = keep('authorization code', responseParams(done.location).get('code'))
    for (const [name, value] of browser.cookies) keep(`cookie ${name}`, value)
    const spa = tokensOf('authorization_code', await postForm(gateway, '/token', {
      grant_type: 'authorization_code', client_id: 'spa', code, redirect_uri: R1, code_verifier: TV1.verifier,
    }))
    // Through the proxy before its grant is revoked below.
    await callApi(spa.access_token, { msg: 'request', status: 200 })

    // Introspection by the token's own client; revocation of an access token and of a refresh token.
    const introspected = await postForm(gateway, '/introspect', { token: refreshed.access_token, ...APP })
    expect(introspected.body.active).toBe(true)
    expect((await postForm(gateway, '/revoke', { token: refreshed.access_token, ...APP })).status).toBe(200)
    expect((await postForm(gateway, '/revoke', { token: spa.refresh_token!, client_id: 'spa' })).status).toBe(200)

    // The device flow, from verification_uri_complete: the user code rides in the query of two page loads.
    const device = await postForm(gateway, '/device_authorization', { client_id: 'tv' })
    expect(device.status).toBe(200)
    const deviceCode = keep('device_code', device.body.device_code)
    const userCode = keep('user_code', device.body.user_code)
    keep('user_code without its dash', userCode.replace('-', ''))
    const tv = new FormBrowser(gateway.url)
    const tvLogin = await tv.get(device.body.verification_uri_complete as string)
    const back = await tv.post('/login', { _csrf: field(tvLogin, '_csrf'), interaction: field(tvLogin, 'interaction'), ...ALICE })
    const entry = await tv.get(back.location!)
    const confirm = await tv.post('/device', { _csrf: field(entry, '_csrf'), user_code: userCode.toLowerCase() })
    const approved = await tv.post('/device', { _csrf: field(confirm, '_csrf'), user_code: field(confirm, 'user_code'), decision: 'approve' })
    expect(approved.status).toBe(200)
    for (const [name, value] of tv.cookies) keep(`device browser cookie ${name}`, value)
    const polled = tokensOf('device_code', await postForm(gateway, '/token', { grant_type: DEVICE_GRANT, device_code: deviceCode, client_id: 'tv' }))
    // A wrong method on the page, user code in the query: fastify's own "route not found" line.
    expect((await fetch(`${gateway.url}/device?user_code=${userCode}`, { method: 'PUT' })).status).toBeGreaterThanOrEqual(400)

    // Tokens where they do not belong: the query of the proxy, of /userinfo, of /token.
    await callApi('', { msg: 'request denied', status: 400 }, `?access_token=${encodeURIComponent(machine.access_token)}`)
    expect((await fetch(`${gateway.url}/userinfo?access_token=${spa.access_token}`)).status).toBe(401)
    expect((await fetch(`${gateway.url}/token?client_secret=${APP.client_secret}&refresh_token=${refreshed.refresh_token}`,
      { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=refresh_token' })).status).toBe(400)
    expect((await fetch(`${gateway.url}/userinfo?${spa.access_token}`)).status).toBe(401)

    // And where they do: the proxy, one request each.
    for (const token of [machine.access_token, password.access_token, polled.access_token]) {
      await callApi(token, { msg: 'request', status: 200 })
    }
  })
  afterAll(() => gateway.close())

  it('no token, code, user code, secret, password, cookie or CSRF token appears in any log line', () => {
    const text = gateway.logs.join('')
    expect(gateway.logs.length).toBeGreaterThan(50)
    for (const [what, secret] of secrets) {
      expect(secret.length, what).toBeGreaterThanOrEqual(8)
      expect(text.includes(secret), `${what} is in the log`).toBe(false)
      expect(text.includes(encodeURIComponent(secret)), `${what} (URL-encoded) is in the log`).toBe(false)
    }
  })

  it('no token, code, user code, secret, password, cookie or CSRF token appears in the audit trail', () => {
    const text = readFileSync(auditFile, 'utf8')
    expect(text).toContain('"event":"token.issued"')
    for (const [what, secret] of secrets) {
      expect(text.includes(secret), `${what} is in the audit trail`).toBe(false)
      expect(text.includes(encodeURIComponent(secret)), `${what} (URL-encoded) is in the audit trail`).toBe(false)
    }
  })

  it('each proxied request produced exactly one line with reqId, route, decision, status and ms', () => {
    const lines = gateway.logs.map((line) => JSON.parse(line) as LogLine)
    expect(proxied).toHaveLength(5)
    for (const call of proxied) {
      const mine = lines.filter((line) => line.reqId === call.id)
      expect(mine, call.id).toHaveLength(1)
      expect(mine[0]).toMatchObject({ msg: call.msg, route: 'api', status: call.status,
        decision: call.status === 200 ? 'forwarded' : expect.any(String) })
      expect(typeof mine[0]!.ms).toBe('number')
    }
  })

  it('the authorization server routes log their path and only the query values that are no secret', () => {
    const urls = gateway.logs.map((line) => JSON.parse(line) as { req?: { url?: string } }).flatMap((line) => line.req?.url ?? [])
    expect(urls).toContain('/device?user_code=[REDACTED]')
    expect(urls).toContain('/userinfo?access_token=[REDACTED]')
    expect(urls).toContain('/userinfo?[REDACTED]')
    expect(urls.find((url) => url.startsWith('/authorize?'))).toBe('/authorize?response_type=code&client_id=spa&redirect_uri=[REDACTED]'
      + '&scope=openid%20orders%3Aread&state=[REDACTED]&nonce=[REDACTED]&code_challenge=[REDACTED]&code_challenge_method=S256')
    expect(gateway.logs.join('')).toContain('Route PUT:/device?user_code=[REDACTED] not found')
  })
})

describe('loggableUrl', () => {
  it('keeps a path without a query as it is', () => {
    expect(loggableUrl('/token')).toBe('/token')
  })

  it('keeps the values of safe parameters, the names of known ones, and nothing of unknown ones', () => {
    expect(loggableUrl('/authorize?client_id=a%20b&code=xyz&eyJhbGciOiJFUzI1NiJ9=&prompt=login'))
      .toBe('/authorize?client_id=a%20b&code=[REDACTED]&[REDACTED]&prompt=login')
  })
})
