/**
 * The abuse a federated sign-in must withstand, each against a provider the test controls: a callback replayed,
 * carried to another browser, or sent to another provider's callback; a mix-up `iss`; ID tokens from another
 * issuer, for another client, without or with a wrong nonce, expired, or signed by a key the provider does not
 * publish; a provider that refuses, fails or is down. Each ends in a page or the client's `error=` redirect, never
 * a 500, never a session, never a code for the client.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { FormBrowser, type PageResponse } from '../../support/browser.js'
import { APP_CLIENT, authorizeUrl, finishAtUs, redeem } from '../../support/federation.js'
import { FORGED_CLIENT, startForgedIdp, type ForgedIdp } from '../../support/forged-idp.js'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { R1 } from '../../support/authserver.js'

let idp: ForgedIdp
let other: ForgedIdp
let gateway: RunningGateway & { issuer: string }
let clock = Date.now()

beforeEach(async () => {
  clock = Date.now()
  ;[idp, other] = await Promise.all([startForgedIdp(), startForgedIdp()])
  gateway = await startAuthServerGateway({
    access_token: { audience: ['orders-api'] },
    clients: [APP_CLIENT],
    identity_providers: [
      { id: 'forged', issuer: idp.issuer, ...FORGED_CLIENT, allow: { email_domains: ['example.com'] } },
      { id: 'other', issuer: other.issuer, ...FORGED_CLIENT },
    ],
  }, {}, { now: () => clock })
})
afterEach(async () => {
  await gateway.close()
  await Promise.all([idp.close(), other.close()])
})

/** /authorize → the chooser → the provider (which approves at once): the redirect to our callback, not yet followed. */
async function toCallback(browser: FormBrowser, provider = 'forged', authorize = authorizeUrl()): Promise<PageResponse> {
  const start = await browser.get(authorize)
  const interaction = new URL(start.location!).searchParams.get('interaction')!
  const sent = await browser.get(`/login/${provider}?interaction=${encodeURIComponent(interaction)}`)
  expect(sent.status).toBe(302)
  const back = await browser.get(sent.location!)
  expect(back.location).toContain(`/callback/${provider}?`)
  return back
}

/** A refusal page: no redirect anywhere, no session started, and nothing a client could redeem. */
function expectRefusalPage(res: PageResponse, status: number): void {
  expect(res.status).toBe(status)
  expect(res.location).toBeUndefined()
  expect(res.headers.get('content-type')).toContain('text/html')
  expect(res.headers.getSetCookie().some((line) => line.startsWith('portcullis_session='))).toBe(false)
}

function audits(event: string): Record<string, unknown>[] {
  return gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === event)
}

describe('the callback', () => {
  it('a good sign-in goes through (the control for every refusal below)', async () => {
    const browser = new FormBrowser(gateway.url)
    const done = await finishAtUs(browser, await toCallback(browser))
    const tokens = await redeem(gateway, done.location)
    expect(tokens.access_token).toBeTruthy()
  })

  it('replayed: the second use of a callback URL is refused, and gets no code', async () => {
    const browser = new FormBrowser(gateway.url)
    const back = await toCallback(browser)
    const first = await browser.get(back.location!)
    expect(first.location).toContain('/consent?')
    const again = await browser.get(back.location!)
    expectRefusalPage(again, 400)
    expect(again.text).toContain('already used')
    expect(idp.tokenRequests).toHaveLength(1)
    expect(audits('federation.failed')).toMatchObject([{ provider: 'forged', reason: 'callback_replayed' }])
  })

  it('carried to another browser (login CSRF): refused, and the code is never exchanged', async () => {
    const victim = new FormBrowser(gateway.url)
    const back = await toCallback(new FormBrowser(gateway.url))
    await victim.get(authorizeUrl())
    const res = await victim.get(back.location!)
    expectRefusalPage(res, 400)
    expect(res.text).toContain('another browser')
    expect(idp.tokenRequests).toHaveLength(0)
  })

  it('a state of one provider at another provider\'s callback (a code for another provider): refused, nothing exchanged', async () => {
    const browser = new FormBrowser(gateway.url)
    const back = new URL((await toCallback(browser)).location!)
    back.pathname = '/callback/other'
    const res = await browser.get(back.href)
    expectRefusalPage(res, 400)
    expect(idp.tokenRequests).toHaveLength(0)
    expect(other.tokenRequests).toHaveLength(0)
    expect(audits('federation.failed')).toMatchObject([{ provider: 'other', reason: 'callback_other_provider' }])
  })

  it('mix-up: an `iss` of another provider on the callback (RFC 9207) is refused before any code exchange', async () => {
    idp.callback = (request) => ({ code: 'code-x', state: request.get('state')!, iss: other.issuer })
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expectRefusalPage(res, 400)
    expect(idp.tokenRequests).toHaveLength(0)
    expect(audits('federation.failed')).toMatchObject([{ reason: 'upstream_response_refused' }])
  })

  it('an unknown state, with a redirect_uri of its own: a page, never a redirect there', async () => {
    const res = await new FormBrowser(gateway.url).get('/callback/forged?state=made-up&code=x&redirect_uri=https%3A%2F%2Fevil.example%2F')
    expectRefusalPage(res, 400)
  })
})

describe('the ID token', () => {
  const cases: Array<[string, (claims: Record<string, unknown>) => Record<string, unknown>]> = [
    ['from another issuer', (claims) => ({ ...claims, iss: 'https://evil.example' })],
    ['for another client', (claims) => ({ ...claims, aud: 'someone-else' })],
    ['for several audiences, authorized for another party (azp)', (claims) => ({ ...claims, aud: [FORGED_CLIENT.client_id, 'someone-else'], azp: 'someone-else' })],
    ['without the nonce', ({ nonce: _nonce, ...claims }) => claims],
    ['with another nonce', (claims) => ({ ...claims, nonce: 'replayed-from-elsewhere' })],
    ['expired', (claims) => ({ ...claims, iat: Math.floor(Date.now() / 1000) - 3600, exp: Math.floor(Date.now() / 1000) - 1800 })],
  ]
  for (const [name, forge] of cases) {
    it(`${name}: refused, no session, no code`, async () => {
      const honest = idp.claims
      idp.claims = (authorization) => forge(honest(authorization))
      const browser = new FormBrowser(gateway.url)
      const res = await browser.get((await toCallback(browser)).location!)
      expectRefusalPage(res, 400)
      expect(res.text).toContain('Try again')
      expect(idp.tokenRequests).toHaveLength(1)
      expect(audits('login.succeeded')).toHaveLength(0)
    })
  }

  it('signed by a key the provider does not publish: refused', async () => {
    idp.signWith = 'foreign'
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expectRefusalPage(res, 400)
    expect(audits('login.succeeded')).toHaveLength(0)
  })
})

describe('the provider says no, fails, or is down', () => {
  it('access_denied goes back to the client as access_denied, with its state and our iss', async () => {
    idp.callback = (request) => ({ error: 'access_denied', state: request.get('state')!, iss: idp.issuer })
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expect(res.status).toBe(302)
    const params = new URL(res.location!).searchParams
    expect(res.location!.startsWith(R1)).toBe(true)
    expect(Object.fromEntries(params)).toMatchObject({ error: 'access_denied', state: 'client-state', iss: gateway.issuer })
  })

  it('an expired code (invalid_grant at the token endpoint): a page that offers to try again', async () => {
    idp.tokenAnswer = { status: 400, body: { error: 'invalid_grant', error_description: 'code expired' } }
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expectRefusalPage(res, 400)
    expect(res.text).toMatch(/href="\/login\?interaction=[^"]+">Try again/)
  })

  it('a token endpoint that fails (503): a 502 page, never a 500', async () => {
    idp.tokenAnswer = { status: 503, body: { error: 'temporarily_unavailable' } }
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expectRefusalPage(res, 502)
  })

  it('down at the start (discovery fails): a 502 page; back up, the next sign-in works', async () => {
    idp.down = true
    const browser = new FormBrowser(gateway.url)
    const start = await browser.get(authorizeUrl())
    const interaction = new URL(start.location!).searchParams.get('interaction')!
    const res = await browser.get(`/login/forged?interaction=${interaction}`)
    expectRefusalPage(res, 502)
    expect(res.text).toContain('cannot be reached')
    idp.down = false
    clock += 6_000
    const again = await browser.get(`/login/forged?interaction=${interaction}`)
    expect(again.status).toBe(302)
    expect(again.location!.startsWith(idp.issuer)).toBe(true)
  })
})

describe('who may sign in', () => {
  it('an address the provider did not verify does not pass allow.email_domains: access_denied to the client', async () => {
    const honest = idp.claims
    idp.claims = (authorization) => ({ ...honest(authorization), email_verified: false })
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expect(new URL(res.location!).searchParams.get('error')).toBe('access_denied')
    expect(audits('federation.failed')).toMatchObject([{ reason: 'not_allowed', detail: 'the e-mail address is not verified by the provider' }])
  })

  it('another domain: access_denied; no account or session is kept', async () => {
    const honest = idp.claims
    idp.claims = (authorization) => ({ ...honest(authorization), email: 'mallory@evil.example' })
    const browser = new FormBrowser(gateway.url)
    const res = await browser.get((await toCallback(browser)).location!)
    expect(new URL(res.location!).searchParams.get('error')).toBe('access_denied')
    expect(browser.cookies.has('portcullis_session')).toBe(false)
  })

  it('no subject, or claims past 16 KiB: refused', async () => {
    const honest = idp.claims
    idp.claims = (authorization) => ({ ...honest(authorization), sub: undefined })
    const browser = new FormBrowser(gateway.url)
    expectRefusalPage(await browser.get((await toCallback(browser)).location!), 400)
    idp.claims = (authorization) => ({ ...honest(authorization), groups: Array.from({ length: 2000 }, (_, i) => `group-with-a-long-name-${i}`) })
    const again = new FormBrowser(gateway.url)
    const res = await again.get((await toCallback(again)).location!)
    expect(new URL(res.location!).searchParams.get('error')).toBe('access_denied')
    expect(audits('federation.failed').at(-1)).toMatchObject({ reason: 'not_allowed' })
  })
})
