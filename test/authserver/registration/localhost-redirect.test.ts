/**
 * Issue 19: `http://localhost` redirect URIs, opt-in. MCP clients register `http://localhost:PORT/callback`
 * (the MCP spec allows "localhost or HTTPS"); RFC 8252 §8.3 finds it NOT RECOMMENDED, so the default forms
 * leave it out. Against the real gateway: /register refuses it unless `policy.redirect_uris` lists it, and
 * refuses every look-alike even then; /authorize lets a registered localhost URI take any port, as loopback
 * IP literals do (RFC 8252 §7.3), and nothing else (no host swap, no path or query change); the consent page
 * warns of a client that introduced itself and is answered only on this computer (MCP Security
 * Considerations, "Localhost Redirect URI Risks"). Metadata documents: test/authserver/client-metadata/documents.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import * as oauth from 'oauth4webapi'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { ALICE, R1 } from '../../support/authserver.js'
import { FormBrowser, field, type PageResponse } from '../../support/browser.js'
import { LOOPBACK, NATIVE_APP, allowRedeemAndRefresh, authorizationUrl, register, registrationSetup, storedRegistrations } from '../../support/registration.js'

type Gateway = RunningGateway & { issuer: string }
const insecure = { [oauth.allowInsecureRequests]: true } as const
const LOCALHOST = 'http://localhost/callback'
const WITH_LOCALHOST = { policy: { redirect_uris: ['loopback', 'localhost', 'https'] } }
const WARNING = 'This application runs on your own computer. Approve only if you just started it yourself.'
const code = (redirectUris: unknown) => ({ ...NATIVE_APP, redirect_uris: redirectUris })

/** Not `http://localhost` as registration and /authorize compare it, however a URL parser or a resolver reads them. */
const LOOK_ALIKES = [
  'http://LOCALHOST:1234/cb', 'http://LocalHost/cb', 'HTTP://localhost/cb', 'http://localhost.:1234/cb', 'http://localhost./cb',
  'http://localhost.evil.com/cb', 'http://localhost.evil.com:1234/cb', 'http://sub.localhost/cb', 'http://localhost6/cb',
  'http://127.0.0.1.nip.io/cb', 'http://localhost@evil.com/cb', 'http://localhost:1234@evil.com/cb', 'http://user@localhost:1234/cb',
  'http://user:pass@localhost/cb', 'http://localhost:0/cb', 'http://localhost:05555/cb', 'http://localhost:65536/cb',
  'http://localhost:99999/cb', 'http://localhost:/cb', 'http://localhos%74/cb', 'http://localhost%2e/cb', 'http://localhost\\evil.com/cb',
  'http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/cb', 'http://local\thost/cb', 'http://localhost/cb#frag',
]

async function start(context: TestContext, registration: Record<string, unknown> = WITH_LOCALHOST, extra: Record<string, unknown> = {}): Promise<Gateway> {
  const gateway = await startAuthServerGateway(registrationSetup(registration, extra))
  context.onTestFinished(() => gateway.close())
  return gateway
}

/** alice signs in for that request: the consent page, and the browser that holds her session. */
async function consentPage(gateway: Gateway, clientId: string, redirectUri: string) {
  const request = await authorizationUrl(gateway.issuer, clientId, redirectUri)
  const browser = new FormBrowser(gateway.url)
  const login = await browser.get((await browser.get(request.url)).location!)
  const consent = await browser.get((await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })).location!)
  expect(consent.status).toBe(200)
  return { ...request, browser, consent }
}

function expectErrorPage(res: PageResponse, what: string): void {
  expect([res.status, res.location], what).toEqual([400, undefined])
  expect(res.text, what).toContain('The address to return to is not registered for this application')
}

describe('localhost redirect URIs at /register', () => {
  let open: Gateway
  let closed: Gateway
  beforeAll(async () => {
    ;[open, closed] = await Promise.all([
      startAuthServerGateway(registrationSetup(WITH_LOCALHOST)),
      startAuthServerGateway(registrationSetup()),
    ])
  })
  afterAll(() => Promise.all([open.close(), closed.close()]))

  it('are refused with invalid_redirect_uri by the default forms, with a description that says what to register instead', async () => {
    const res = await register(closed, code(['http://localhost:1234/cb']))
    expect([res.status, res.body.error]).toEqual([400, 'invalid_redirect_uri'])
    expect(res.body.error_description).toBe(
      'redirect_uris[0]: localhost redirect URIs may not be registered here: use http://127.0.0.1 or http://[::1] (RFC 8252 section 8.3)')
    expect(await storedRegistrations(closed)).toEqual([])
  })

  it('are registered where policy.redirect_uris lists localhost: with a port or none, a path, a query', async () => {
    const uris = [LOCALHOST, 'http://localhost:1234/cb', 'http://localhost:65535/cb?x=1', 'http://localhost:8080']
    const res = await register(open, code(uris))
    expect(res.status, res.text).toBe(201)
    expect(res.body.redirect_uris).toEqual(uris)
  })

  it.each(LOOK_ALIKES)('refuses the look-alike %s even where localhost is listed, storing nothing', async (uri) => {
    const before = (await storedRegistrations(open)).length
    const res = await register(open, code([uri]))
    expect([res.status, res.body.error], res.text).toEqual([400, 'invalid_redirect_uri'])
    expect(await storedRegistrations(open)).toHaveLength(before)
  })
})

describe('a registered localhost redirect URI at /authorize', () => {
  it('accepts any port (RFC 8252 §7.3), and nothing else: no host swap either way, no path, query or scheme change', async (context) => {
    const gateway = await start(context)
    const localhost = (await register(gateway, code([LOCALHOST]))).body.client_id as string
    const loopback = (await register(gateway, code([LOOPBACK]))).body.client_id as string
    const get = async (clientId: string, uri: string) => new FormBrowser(gateway.url).get((await authorizationUrl(gateway.issuer, clientId, uri)).url)
    for (const uri of ['http://localhost:51004/callback', 'http://localhost:1/callback', 'http://localhost:65535/callback', LOCALHOST]) {
      const res = await get(localhost, uri)
      expect([res.status, res.location?.includes('/login?interaction=')], uri).toEqual([302, true])
    }
    for (const uri of [
      'http://127.0.0.1:51004/callback', 'http://127.0.0.1/callback', 'http://[::1]:51004/callback', 'http://LOCALHOST:51004/callback',
      'http://localhost.:51004/callback', 'http://localhost.evil.com:51004/callback', 'http://localhost:51004@evil.com/callback',
      'http://localhost:51004/callback/', 'http://localhost:51004/Callback', 'http://localhost:51004/other', 'http://localhost:51004/callback?x=1',
      'http://localhost:0/callback', 'http://localhost:99999/callback', 'http://localhost:05100/callback', 'http://localhost:/callback',
      'https://localhost:51004/callback', 'https://localhost/callback',
    ]) expectErrorPage(await get(localhost, uri), uri)
    // The other way round: a registered loopback IP literal never accepts localhost.
    for (const uri of ['http://localhost:51004/callback', 'http://localhost/callback']) expectErrorPage(await get(loopback, uri), uri)
  })
})

describe('the consent page for a client answered only on this computer', () => {
  it('warns, names the host the answer goes to, and the flow then runs on the port the client chose', async (context) => {
    const gateway = await start(context)
    const clientId = (await register(gateway, code([LOCALHOST]))).body.client_id as string
    const { browser, consent, verifier, state, redirectUri } = await consentPage(gateway, clientId, 'http://localhost:51004/callback')
    expect(consent.text).toContain(WARNING)
    expect(consent.text).toContain('an application on this computer (localhost:51004)')
    const issuer = new URL(gateway.issuer)
    const discovered = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
    const as: oauth.AuthorizationServer = { ...discovered, authorization_response_iss_parameter_supported: true }
    await allowRedeemAndRefresh({ gateway, browser, consent, as, client: { client_id: clientId }, redirectUri, state, verifier, scope: 'orders:read' })
  })

  it('warns for a loopback IP literal too', async (context) => {
    const gateway = await start(context)
    const clientId = (await register(gateway, code([LOOPBACK, 'http://[::1]/callback']))).body.client_id as string
    const { consent } = await consentPage(gateway, clientId, 'http://127.0.0.1:51004/callback')
    expect(consent.text).toContain(WARNING)
    expect(consent.text).toContain('an application on this computer (127.0.0.1:51004)')
  })

  it('does not warn for a registered client that can also be answered over https, nor for a YAML client', async (context) => {
    const native = { client_id: 'native', token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], redirect_uris: [LOOPBACK], scopes: ['orders:read'] }
    const gateway = await start(context, WITH_LOCALHOST, { clients: [native] })
    const mixed = (await register(gateway, code([R1, LOCALHOST]))).body.client_id as string
    const registered = (await consentPage(gateway, mixed, 'http://localhost:51004/callback')).consent
    expect(registered.text).toContain('registered itself with this server')
    expect(registered.text).not.toContain(WARNING)
    // The operator configured this one: a loopback-only YAML client gets no warning.
    expect((await consentPage(gateway, 'native', 'http://127.0.0.1:51004/callback')).consent.text).not.toContain(WARNING)
  })
})
