/**
 * The device verification page /device (RFC 8628 §3.3; checklist §4 DV-01..DV-05, with DA-02, DA-03,
 * DC-02 and DC-04 seen from the page) against the real gateway and embedded server on loopback, driven
 * by test/support/browser.ts as a browser would: login form, code form, confirm page, approve or deny.
 * The device's side is real too: /device_authorization, then polls at /token. test/authserver/device.test.ts
 * covers the endpoint and the grant themselves.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import { Agent } from 'undici'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, callApi, postForm, type OAuthResponse, type DeviceAuthorization } from '../support/authserver.js'
import { FormBrowser, expectPageHeaders, field, type PageResponse } from '../support/browser.js'
import { testClock, type Clock } from '../support/clock.js'

type Gateway = RunningGateway & { issuer: string }

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/
/** A public device client that may refresh, with a display name the confirm page must show (DV-05). */
const TV = { client_id: 'tv' }
const TV_NAME = 'Living Room TV'
/** DV-03: one sentence for an unknown, an expired and a used code. */
const INVALID_CODE = 'That code is not valid or has expired. Check the code on your device and try again.'

const setup = {
  access_token: { audience: ['orders-api'] },
  clients: [
    { ...TV, name: TV_NAME, token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT, 'refresh_token'], scopes: ['orders:read', 'profile'] },
  ],
  users: [{ ...ALICE, claims: { name: 'Alice' } }],
}

async function start(context: TestContext, clock?: Clock): Promise<Gateway> {
  const gateway = await startAuthServerGateway(setup, {}, clock ? { now: clock.now } : {})
  context.onTestFinished(() => gateway.close())
  return gateway
}

/** What the device does first (DA-02): its device_code and the user code it shows. */
async function issue(gateway: Gateway, scope?: string): Promise<DeviceAuthorization> {
  const res = await postForm(gateway, '/device_authorization', { ...TV, ...(scope !== undefined && { scope }) })
  expect(res.status).toBe(200)
  const body = res.body as unknown as DeviceAuthorization
  expect(body.user_code).toMatch(USER_CODE)
  return body
}

function poll(gateway: Gateway, deviceCode: string): Promise<OAuthResponse> {
  return postForm(gateway, '/token', { grant_type: DEVICE_GRANT, device_code: deviceCode, ...TV })
}

const refusal = (res: OAuthResponse) => [res.status, res.body.error]

/** Logs alice in through the login form /device shows (DV-05); returns the page the login leads back to. */
async function signIn(browser: FormBrowser, start = '/device'): Promise<PageResponse> {
  const login = await browser.get(start)
  expect(login.status).toBe(200)
  expect(login.text).toContain('name="password"')
  const done = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
  expect(done.status).toBe(303)
  expect(browser.cookies.has('portcullis_session')).toBe(true)
  return browser.get(done.location!)
}

/** Submits the code form (or, with `decision`, the confirm form) with the CSRF token of `page`. */
function submit(browser: FormBrowser, page: PageResponse, userCode: string, decision?: 'approve' | 'deny'): Promise<PageResponse> {
  return browser.post('/device', { _csrf: field(page, '_csrf'), user_code: userCode, ...(decision !== undefined && { decision }) })
}

/** The value of the visible code input, undefined when it has none. */
function codeInput(page: PageResponse): string | undefined {
  const input = /<input type="text" id="user_code" name="user_code"[^>]*>/.exec(page.text)
  expect(input, 'no code input on the page').not.toBeNull()
  return /\svalue="([^"]*)"/.exec(input![0])?.[1]
}

/** The text of the page's alert, if any. */
const alertOf = (page: PageResponse) => /<p role="alert"[^>]*>([^<]*)</.exec(page.text)?.[1]

/** DV-03: the code form again, 400, with the one error sentence, and no redirect. */
function expectInvalidCode(res: PageResponse): void {
  expect(res.status).toBe(400)
  expect(res.location).toBeUndefined()
  expect(res.headers.get('content-type')).toMatch(/^text\/html/)
  expectPageHeaders(res)
  expect(alertOf(res)).toBe(INVALID_CODE)
  expect(res.text).not.toContain('value="approve"')
}

/** DV-05: the confirm page for `userCode`, with an explicit Approve and Deny. */
function expectConfirmPage(res: PageResponse, userCode: string): void {
  expect(res.status).toBe(200)
  expectPageHeaders(res)
  expect(field(res, 'user_code')).toBe(userCode)
  expect(res.text).toContain(`<strong class="code">${userCode}</strong>`)
  expect(res.text).toMatch(/<button type="submit" name="decision" value="approve"/)
  expect(res.text).toMatch(/<button type="submit" name="decision" value="deny"/)
}

/** DV-04: the lockout page: 429, Retry-After within the five-minute window, the code form and no confirm. */
function expectLocked(res: PageResponse): void {
  expect(res.status).toBe(429)
  expect(res.location).toBeUndefined()
  expectPageHeaders(res)
  const retryAfter = Number(res.headers.get('retry-after'))
  expect(Number.isInteger(retryAfter)).toBe(true)
  expect(retryAfter).toBeGreaterThan(0)
  expect(retryAfter).toBeLessThanOrEqual(300)
  expect(alertOf(res)).toMatch(/^Too many wrong codes\. Try again in [1-5] minutes?\.$/)
  expect(res.text).not.toContain('value="approve"')
}

/** Requests that leave from another loopback address (all of 127/8 is this host): DV-04 counts per address. */
class BrowserAt extends FormBrowser {
  constructor(base: string, public agent: Agent) {
    super(base)
  }

  override request(pathOrUrl: string, init: RequestInit = {}): Promise<PageResponse> {
    return super.request(pathOrUrl, Object.assign({}, init, { dispatcher: this.agent }))
  }
}

function agentAt(context: TestContext, localAddress: string): Agent {
  const agent = new Agent({ localAddress })
  context.onTestFinished(() => agent.close())
  return agent
}

describe('/device: login, then the code form (DV-01)', () => {
  it('DV-01 GET /device without a session shows the login form with a CSRF field and the A-14 headers; after login, the code form', async (context) => {
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get('/device')
    expect(login.status).toBe(200)
    expect(login.headers.get('content-type')).toMatch(/^text\/html/)
    expectPageHeaders(login)
    expect(login.headers.get('content-security-policy')).toContain('default-src \'none\'')
    expect(login.text).not.toMatch(/<script/i)
    expect(login.text).toContain('Sign in to connect a device.')
    expect(login.text).toContain('<form method="post" action="/login">')
    expect(field(login, '_csrf')).not.toBe('')
    expect(field(login, 'interaction')).not.toBe('')
    expect(login.text).toContain('name="username"')
    expect(login.text).toContain('name="password"')
    expect(login.text).not.toContain('id="user_code"')
    expect(browser.cookies.has('portcullis_csrf')).toBe(true)

    const done = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    expect(done.status).toBe(303)
    expectPageHeaders(done)
    expect(done.location).toBe(`${gateway.url}/device`)

    const form = await browser.get(done.location!)
    expect(form.status).toBe(200)
    expectPageHeaders(form)
    expect(form.text).not.toMatch(/<script/i)
    expect(form.text).toContain('Signed in as <strong>alice</strong>')
    expect(form.text).toContain('<form method="post" action="/device">')
    expect(field(form, '_csrf')).not.toBe('')
    expect(codeInput(form)).toBeUndefined()
    expect(form.text).not.toContain('name="password"')
    // A logged-in browser goes straight to the code form.
    expect(codeInput(await browser.get('/device'))).toBeUndefined()
  })

  it('DV-01 DA-02 DC-02 verification_uri_complete only pre-fills the code: the device stays pending through the visit, the login and the confirm page, until the approve POST', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const device = await issue(gateway)
    expect(device.verification_uri_complete).toBe(`${gateway.issuer}/device?user_code=${device.user_code}`)
    const pending = async () => {
      expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])
      clock.advance(device.interval * 1000)
    }
    const browser = new FormBrowser(gateway.url)

    const login = await browser.get(device.verification_uri_complete)
    expect(login.status).toBe(200)
    expect(login.text).toContain('name="password"')
    await pending()

    const back = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    expect(back.status).toBe(303)
    expect(back.location).toBe(`${gateway.url}/device?user_code=${device.user_code}`)
    await pending()

    const prefilled = await browser.get(back.location!)
    expect(prefilled.status).toBe(200)
    expectPageHeaders(prefilled)
    expect(codeInput(prefilled)).toBe(device.user_code)
    expect(prefilled.text).not.toContain('value="approve"')
    await pending()
    // A visit with a session pre-fills too (shown as issued, whatever the spelling), and approves nothing either.
    const spelled = await browser.get(`/device?user_code=${device.user_code.replace('-', '').toLowerCase()}`)
    expect(codeInput(spelled)).toBe(device.user_code)
    await pending()

    const confirm = await submit(browser, prefilled, device.user_code)
    expectConfirmPage(confirm, device.user_code)
    await pending()

    const approved = await submit(browser, confirm, device.user_code, 'approve')
    expect(approved.status).toBe(200)
    expect(approved.text).toContain('Your device is connected.')
    expect((await poll(gateway, device.device_code)).status).toBe(200)
  })

  it('DV-01 a pre-filled or typed code is escaped into the input, never markup', async (context) => {
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const markup = '"><script>alert(1)</script>'
    const page = await browser.get(`/device?user_code=${encodeURIComponent(markup)}`)
    expect(page.status).toBe(200)
    expect(page.text).not.toMatch(/<script/i)
    expect(codeInput(page)).toBe('&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;')
    const typed = await submit(browser, form, markup)
    expectInvalidCode(typed)
    expect(typed.text).not.toMatch(/<script/i)
    expect(codeInput(typed)).toBe('&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;')
  })
})

describe('/device: entering the code (DV-02, DV-03)', () => {
  it('DV-02 DA-03 the issued code typed as "wdjb mjht", "WDJBMJHT" or "wdjb-mjht" reaches the confirm page, and approves as typed', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const spellings = [
      device.user_code.toLowerCase().replace('-', ' '),
      device.user_code.replace('-', ''),
      device.user_code.toLowerCase(),
    ]
    for (const spelling of spellings) expectConfirmPage(await submit(browser, form, spelling), device.user_code)
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])
    const approved = await submit(browser, form, spellings[0]!, 'approve')
    expect(approved.status).toBe(200)
    expect(approved.text).toContain('Your device is connected.')
    expect((await poll(gateway, device.device_code)).status).toBe(200)
  })

  it('DV-03 an unknown, an expired and an already used code each get the same error on the page (400, no Location), reveal no other code, and count as failures', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const bystander = await issue(gateway)
    const used = await issue(gateway)
    const expired = await issue(gateway)
    const unknown = 'BCDF-GHJK'
    expect([bystander.user_code, used.user_code, expired.user_code]).not.toContain(unknown)
    const issued = [bystander.user_code, used.user_code, expired.user_code]

    const confirm = await submit(browser, form, used.user_code)
    expectConfirmPage(confirm, used.user_code)
    expect((await submit(browser, confirm, used.user_code, 'approve')).status).toBe(200)

    const pages: Array<[string, PageResponse]> = []
    pages.push([unknown, await submit(browser, form, unknown)])
    pages.push([used.user_code, await submit(browser, form, used.user_code)])
    clock.advance(601_000)
    pages.push([expired.user_code, await submit(browser, form, expired.user_code)])
    for (const [typed, page] of pages) {
      expectInvalidCode(page)
      // What the user typed comes back in the input; no other code appears anywhere.
      expect(codeInput(page)).toBe(typed)
      for (const other of issued.filter((code) => code !== typed)) expect(page.text).not.toContain(other)
    }
    expect(pages.map(([, page]) => alertOf(page))).toEqual([INVALID_CODE, INVALID_CODE, INVALID_CODE])
    // The expired device hears expired_token (DC-04), not a decision.
    expect(refusal(await poll(gateway, expired.device_code))).toEqual([400, 'expired_token'])

    // Three failures so far: a valid code still gets through, and two more failures lock the form (DV-04).
    const fresh = await issue(gateway)
    expectConfirmPage(await submit(browser, form, fresh.user_code), fresh.user_code)
    expectInvalidCode(await submit(browser, form, unknown))
    expectInvalidCode(await submit(browser, form, 'hello'))
    expectLocked(await submit(browser, form, fresh.user_code))
  })
})

describe('/device: throttling wrong codes (DV-04)', () => {
  it('DV-04 after 5 wrong codes the form answers 429 with Retry-After and a lockout message, refuses even the right code, and another browser session from the same address is locked too', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    for (const wrong of ['BCDF-GHJK', 'bcdfghjk', 'hello', 'WDJB-MJHT', 'ZZZZ-ZZZZ']) {
      expect([device.user_code]).not.toContain(wrong)
      expectInvalidCode(await submit(browser, form, wrong))
    }
    expectLocked(await submit(browser, form, device.user_code))
    expectLocked(await submit(browser, form, device.user_code, 'approve'))
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])

    // All requests here come from 127.0.0.1: a new session from there shares the address's count.
    const other = new FormBrowser(gateway.url)
    const otherForm = await signIn(other)
    expect(other.cookies.get('portcullis_session')).not.toBe(browser.cookies.get('portcullis_session'))
    expectLocked(await submit(other, otherForm, device.user_code))
  })

  it('DV-04 the count follows the browser session to another address, and spares another browser at another address', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway)
    const browser = new BrowserAt(gateway.url, agentAt(context, '127.0.0.2'))
    const form = await signIn(browser)
    for (let i = 0; i < 5; i++) expectInvalidCode(await submit(browser, form, 'BCDF-GHJK'))
    expectLocked(await submit(browser, form, device.user_code))

    // Same session, new address: still locked (the session key).
    browser.agent = agentAt(context, '127.0.0.3')
    expectLocked(await submit(browser, form, device.user_code))
    // New session, the locked address: locked (the address key).
    const sameAddress = new BrowserAt(gateway.url, agentAt(context, '127.0.0.2'))
    expectLocked(await submit(sameAddress, await signIn(sameAddress), device.user_code))
    // New session, new address: neither key has failed.
    const elsewhere = new BrowserAt(gateway.url, agentAt(context, '127.0.0.4'))
    expectConfirmPage(await submit(elsewhere, await signIn(elsewhere), device.user_code), device.user_code)
  })
})

describe('/device: the decision (DV-05, DC-04)', () => {
  it('DV-05 the confirm page names the client and its scopes; approve gives the device a T-04 response the gateway accepts; the code works only once', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway, 'orders:read profile')
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const confirm = await submit(browser, form, device.user_code)
    expectConfirmPage(confirm, device.user_code)
    expect(confirm.text).toContain(`<title>Connect ${TV_NAME}?</title>`)
    expect(confirm.text).toContain(`wants to act as <strong>${TV_NAME}</strong>`)
    expect(confirm.text).toContain('<li>orders:read</li>')
    expect(confirm.text).toContain('Read your profile (name, username, picture) <small>(profile)</small>')
    expect(confirm.text).toContain('Signed in as <strong>alice</strong>')

    const approved = await submit(browser, confirm, device.user_code, 'approve')
    expect(approved.status).toBe(200)
    expect(approved.location).toBeUndefined()
    expectPageHeaders(approved)
    expect(approved.text).toContain('<title>Device connected</title>')

    const res = await poll(gateway, device.device_code)
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('pragma')).toBe('no-cache')
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.body).toEqual({
      access_token: expect.any(String), token_type: 'Bearer', expires_in: expect.any(Number),
      scope: 'orders:read profile', refresh_token: expect.stringMatching(/^prt_/),
    })
    const tokens = res.body as { access_token: string; expires_in: number }
    const claims = decodeJwt(tokens.access_token)
    expect(Number.isInteger(tokens.expires_in) && tokens.expires_in > 0).toBe(true)
    expect(tokens.expires_in).toBe(claims.exp! - claims.iat!)
    expect(claims).toMatchObject({ sub: 'alice', client_id: 'tv', scope: 'orders:read profile', iss: gateway.issuer })
    const api = await callApi(gateway, tokens.access_token)
    expect(api.status).toBe(200)
    const echoed = await api.json() as { headers: Record<string, string> }
    expect(echoed.headers['x-auth-subject']).toBe('alice')
    expect(echoed.headers['x-auth-client-id']).toBe('tv')

    // Once: a second approve, a deny, or the code form again all get the error page.
    expectInvalidCode(await submit(browser, confirm, device.user_code, 'approve'))
    expectInvalidCode(await submit(browser, confirm, device.user_code, 'deny'))
    expectInvalidCode(await submit(browser, form, device.user_code))
    // The tokens already issued stand: the refused decisions changed nothing.
    expect((await callApi(gateway, tokens.access_token)).status).toBe(200)
  })

  it('DV-05 DC-04 deny: the result page says so, the next poll gets access_denied, and the code cannot be approved afterwards', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway, 'orders:read')
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const confirm = await submit(browser, form, device.user_code)
    expectConfirmPage(confirm, device.user_code)
    expect(confirm.text).toContain('<li>orders:read</li>')
    expect(confirm.text).not.toContain('profile')

    const denied = await submit(browser, confirm, device.user_code, 'deny')
    expect(denied.status).toBe(200)
    expect(denied.location).toBeUndefined()
    expectPageHeaders(denied)
    expect(denied.text).toContain('<title>Request denied</title>')
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'access_denied'])

    expectInvalidCode(await submit(browser, confirm, device.user_code, 'approve'))
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'access_denied'])
  })

  it('DV-05 a decision other than approve or deny approves nothing and counts as a failure', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const confirm = await submit(browser, form, device.user_code)
    const odd = await browser.post('/device', { _csrf: field(confirm, '_csrf'), user_code: device.user_code, decision: 'yes' })
    expectInvalidCode(odd)
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])
    // It was the first of five: four wrong codes later, even the real approval is refused.
    for (let i = 0; i < 4; i++) expectInvalidCode(await submit(browser, form, 'BCDF-GHJK'))
    expectLocked(await submit(browser, confirm, device.user_code, 'approve'))
  })
})

describe('/device: forged and anonymous posts', () => {
  it('A-15 a POST /device without the CSRF token, or with another browser\'s, gets a 403 page and approves nothing', async (context) => {
    const clock = testClock()
    const gateway = await start(context, clock)
    const device = await issue(gateway)
    const browser = new FormBrowser(gateway.url)
    const form = await signIn(browser)
    const confirm = await submit(browser, form, device.user_code)
    expectConfirmPage(confirm, device.user_code)

    const missing = await browser.post('/device', { user_code: device.user_code, decision: 'approve' })
    expect(missing.status).toBe(403)
    expect(missing.location).toBeUndefined()
    expectPageHeaders(missing)
    expect(alertOf(missing)).toContain('This form has expired or was not sent from this site.')
    const other = new FormBrowser(gateway.url)
    const otherLogin = await other.get('/device')
    const foreign = await browser.post('/device', { _csrf: field(otherLogin, '_csrf'), user_code: device.user_code, decision: 'approve' })
    expect(foreign.status).toBe(403)
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])

    // The refusals used nothing up: the real form still works.
    clock.advance(5000)
    expect((await submit(browser, confirm, device.user_code, 'approve')).status).toBe(200)
    expect((await poll(gateway, device.device_code)).status).toBe(200)
  })

  it('a POST /device without a session is sent to /device (303) and approves nothing', async (context) => {
    const gateway = await start(context)
    const device = await issue(gateway)
    const browser = new FormBrowser(gateway.url)
    // The login form gives this browser a CSRF secret and token, so the POST gets past A-15.
    const login = await browser.get('/device')
    const forms: Array<Record<string, string>> = [{ user_code: device.user_code, decision: 'approve' }, { user_code: device.user_code }]
    for (const form of forms) {
      const res = await browser.post('/device', { _csrf: field(login, '_csrf'), ...form })
      expect(res.status).toBe(303)
      expectPageHeaders(res)
      expect(res.location).toBe(`${gateway.url}/device`)
      expect(res.text).toBe('')
    }
    expect(browser.cookies.has('portcullis_session')).toBe(false)
    expect(refusal(await poll(gateway, device.device_code))).toEqual([400, 'authorization_pending'])
    // A session that is not (or no longer) in the store is no session either.
    browser.cookies.set('portcullis_session', 'forged-session-cookie')
    const forged = await browser.post('/device', { _csrf: field(login, '_csrf'), user_code: device.user_code, decision: 'approve' })
    expect(forged.status).toBe(303)
    expect(forged.location).toBe(`${gateway.url}/device`)
  })
})
