/**
 * Issue 19: RFC 7591 dynamic client registration and RFC 7592 management at the embedded server, against
 * the real gateway on loopback: a strict client (oauth4webapi) discovers the endpoint, registers, and runs
 * the authorization code flow (through the login and consent pages) or client_credentials with what it got;
 * the initial access token; reading and deleting a registration; YAML client_ids can never be taken.
 * Policy refusals, body limits and the rate are in test/authserver/registration/policy.test.ts; restarts, expiry and
 * Redis in test/authserver/registration/store.test.ts.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import * as oauth from 'oauth4webapi'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { ALICE, basic, callApi, postForm } from '../../support/authserver.js'
import { FormBrowser, field, responseParams } from '../../support/browser.js'
import {
  allowRedeemAndRefresh,
  IAT, LOOPBACK, NATIVE_APP, RS, auditEvents, manage, register, registrationSetup, storedRegistrations,
} from '../../support/registration.js'

type Gateway = RunningGateway & { issuer: string }
const insecure = { [oauth.allowInsecureRequests]: true } as const

async function start(context: TestContext, registration: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Promise<Gateway> {
  const gateway = await startAuthServerGateway(registrationSetup(registration, extra))
  context.onTestFinished(() => gateway.close())
  return gateway
}

async function discover(gateway: Gateway): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(gateway.issuer)
  return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
}

/** The confidential machine client of the IAT-protected policy that allows client_credentials. */
const MACHINE_POLICY = { initial_access_token: IAT, policy: { grant_types: ['authorization_code', 'refresh_token', 'client_credentials'] } }
const MACHINE = { client_name: 'Nightly job', grant_types: ['client_credentials'], token_endpoint_auth_method: 'client_secret_basic', scope: 'orders:read' }

describe('dynamic client registration (RFC 7591)', () => {
  it('is off by default: no registration_endpoint in the metadata, and /register is not served', async (context) => {
    const gateway = await startAuthServerGateway({ clients: [], users: [] })
    context.onTestFinished(() => gateway.close())
    expect(await discover(gateway)).not.toHaveProperty('registration_endpoint')
    expect((await register(gateway, NATIVE_APP)).status).toBe(404)
  })

  it('registers a public client with a loopback redirect URI, which then runs authorization code + PKCE with oauth4webapi', async (context) => {
    const gateway = await start(context)
    const discovered = await discover(gateway)
    expect(discovered.registration_endpoint).toBe(`${gateway.issuer}/register`)
    expect(discovered.scopes_supported).toEqual(expect.arrayContaining(['orders:read', 'orders:write']))
    const response = await oauth.dynamicClientRegistrationRequest(discovered, NATIVE_APP, insecure)
    expect(response.status).toBe(201)
    expect(response.headers.get('cache-control')).toBe('no-store')
    const registered = await oauth.processDynamicClientRegistrationResponse(response)
    // RFC 7591 §3.2.1: the metadata as registered, the server's own fields, and RFC 7592's.
    expect(registered).toEqual({
      ...NATIVE_APP,
      client_id: expect.stringMatching(/^dcr_[A-Za-z0-9_-]{22}$/) as unknown,
      client_id_issued_at: expect.any(Number) as unknown,
      registration_access_token: expect.stringMatching(/^rat_[A-Za-z0-9_-]{43}$/) as unknown,
      registration_client_uri: `${gateway.issuer}/register?client_id=${registered.client_id}`,
    })
    expect(Math.abs((registered.client_id_issued_at as number) - Date.now() / 1000)).toBeLessThan(60)
    expect(auditEvents(gateway, 'client.registered')).toEqual([expect.objectContaining({
      client_id: registered.client_id, client_name: 'Native CLI', token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'], redirect_uris: [LOOPBACK], scope: 'orders:read', ip: '127.0.0.1',
    })])
    expect(gateway.audit.join('\n')).not.toContain(registered.registration_access_token as string)

    // The flow, as a native app runs it: its loopback listener got a port of its own (RFC 8252 §7.3).
    const as: oauth.AuthorizationServer = { ...discovered, authorization_response_iss_parameter_supported: true }
    const client: oauth.Client = { client_id: registered.client_id }
    const redirectUri = 'http://127.0.0.1:51004/callback'
    const verifier = oauth.generateRandomCodeVerifier()
    const state = oauth.generateRandomState()
    const url = new URL(as.authorization_endpoint!)
    for (const [name, value] of Object.entries({
      response_type: 'code', client_id: client.client_id, redirect_uri: redirectUri, scope: 'orders:read', state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
    })) url.searchParams.set(name, value)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(url.href)).location!)
    expect(login.text).toContain('Sign in to continue to Native CLI.')
    const consentRedirect = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    const consent = await browser.get(consentRedirect.location!)
    // Its name is its own claim: the page says so, and where the answer goes.
    expect(consent.text).toContain('registered itself with this server: its name is not verified')
    expect(consent.text).toContain('an application on this computer (127.0.0.1:51004)')
    await allowRedeemAndRefresh({ gateway, browser, consent, as, client, redirectUri, state, verifier, scope: 'orders:read' })
    // A scope the registration policy allows but the client did not register for: the user is asked (its registered
    // scope is its default, not a ceiling); one outside the policy is refused, as for any client.
    const wider = new URL(url)
    wider.searchParams.set('scope', 'orders:read orders:write')
    const asked = await browser.get(wider.href)
    expect(asked.location).toMatch(/\/consent\?/)
    expect((await browser.get(asked.location!)).text).toContain('orders:write')
    // Without a scope parameter it gets its registered scope, not the policy's.
    const unscoped = new URL(url)
    unscoped.searchParams.delete('scope')
    const byDefault = await browser.get((await browser.get(unscoped.href)).location!)
    expect(byDefault.text).toContain('orders:read')
    expect(byDefault.text).not.toContain('orders:write')
    const outside = new URL(url)
    outside.searchParams.set('scope', 'orders:read admin')
    expect(responseParams((await browser.get(outside.href)).location).get('error')).toBe('invalid_scope')
  })

  it('registers a confidential client that gets tokens with client_credentials; its secret is shown once and stored only hashed', async (context) => {
    const gateway = await start(context, MACHINE_POLICY)
    const as = await discover(gateway)
    const registered = await oauth.processDynamicClientRegistrationResponse(
      await oauth.dynamicClientRegistrationRequest(as, MACHINE, { ...insecure, initialAccessToken: IAT }))
    expect(registered).toMatchObject({ ...MACHINE, redirect_uris: [], response_types: [], client_secret_expires_at: 0 })
    const secret = registered.client_secret as string
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/)
    const client: oauth.Client = { client_id: registered.client_id }
    const tokens = await oauth.processClientCredentialsResponse(as, client,
      await oauth.clientCredentialsGrantRequest(as, client, oauth.ClientSecretBasic(secret), new URLSearchParams({ scope: 'orders:read' }), insecure))
    expect(tokens.scope).toBe('orders:read')
    expect((await callApi(gateway, tokens.access_token)).status).toBe(200)
    // client_secret_post works too (CA-04); a wrong secret is 401 invalid_client like any other.
    const post = await postForm(gateway, '/token', { grant_type: 'client_credentials', client_id: client.client_id, client_secret: secret })
    expect(post.status).toBe(200)
    const wrong = await postForm(gateway, '/token', { grant_type: 'client_credentials' }, { authorization: basic(client.client_id, `${secret}x`) })
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_client'])
    // Introspection by the resource server names the client.
    const introspected = await postForm(gateway, '/introspect', { token: tokens.access_token }, { authorization: basic(RS.client_id, RS.client_secret) })
    expect(introspected.body).toMatchObject({ active: true, client_id: client.client_id })

    const [stored, ...others] = await storedRegistrations(gateway)
    expect(others).toEqual([])
    const text = JSON.stringify(stored)
    expect(text).not.toContain(secret)
    expect(text).not.toContain(registered.registration_access_token as string)
    expect(stored!.value.secretHash).toMatch(/^scrypt\$/)
    expect(auditEvents(gateway, 'token.issued').map((line) => line.client_id)).toEqual([client.client_id, client.client_id])
    // Read back with its registration access token: neither secret reaches a log line.
    expect((await manage(registered.registration_client_uri as string, 'GET', registered.registration_access_token as string)).status).toBe(200)
    for (const lines of [gateway.logs, gateway.audit]) {
      expect(lines.join('\n')).not.toContain(secret)
      expect(lines.join('\n')).not.toContain(registered.registration_access_token as string)
    }
  })

  it('requires the initial access token when configured: none is 401 with a bare Bearer challenge, a wrong one 401 invalid_token; neither stores anything', async (context) => {
    const gateway = await start(context, MACHINE_POLICY)
    const none = await register(gateway, MACHINE)
    expect(none.status).toBe(401)
    expect(none.headers.get('www-authenticate')).toBe(`Bearer realm="${gateway.issuer}"`)
    const wrong = await register(gateway, MACHINE, { token: `${IAT}x` })
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_token'])
    expect(wrong.headers.get('www-authenticate')).toMatch(/^Bearer realm=".+", error="invalid_token"/)
    const basicAuth = await register(gateway, MACHINE, { headers: { authorization: basic('x', IAT) } })
    expect(basicAuth.status).toBe(401)
    expect(await storedRegistrations(gateway)).toEqual([])
    expect(auditEvents(gateway, 'client.registered')).toEqual([])
    const right = await register(gateway, MACHINE, { token: IAT })
    expect(right.status).toBe(201)
    expect(await storedRegistrations(gateway)).toHaveLength(1)
  })

  it('is open without an initial access token: a Bearer token sent anyway is ignored', async (context) => {
    const gateway = await start(context)
    expect((await register(gateway, NATIVE_APP)).status).toBe(201)
    expect((await register(gateway, NATIVE_APP, { token: 'anything-at-all' })).status).toBe(201)
  })
})

describe('registration management (RFC 7592)', () => {
  it('reads with the registration access token; no token, a wrong one, another client\'s or an unknown client is 401; PATCH is 405', async (context) => {
    const gateway = await start(context)
    const first = (await register(gateway, NATIVE_APP)).body
    const second = (await register(gateway, { ...NATIVE_APP, client_name: 'Other' })).body
    const uri = first.registration_client_uri as string
    const read = await manage(uri, 'GET', first.registration_access_token as string)
    expect(read.status).toBe(200)
    expect(read.headers.get('cache-control')).toBe('no-store')
    // The same information as at registration, the token included (the one the client just presented).
    expect(read.body).toEqual(first)

    const missing = await manage(uri, 'GET', undefined)
    expect([missing.status, missing.headers.get('www-authenticate')]).toEqual([401, `Bearer realm="${gateway.issuer}"`])
    for (const [target, token] of [
      [uri, `${first.registration_access_token as string}x`],
      [uri, second.registration_access_token as string],
      [`${gateway.url}/register?client_id=dcr_unknown`, first.registration_access_token as string],
      [`${gateway.url}/register`, first.registration_access_token as string],
    ] as const) {
      const refused = await manage(target, 'GET', token)
      expect([refused.status, refused.body.error]).toEqual([401, 'invalid_token'])
      expect(refused.headers.get('www-authenticate')).toContain('error="invalid_token"')
      expect(refused.text).not.toContain('redirect_uris')
    }
    const patch = await manage(uri, 'PATCH', first.registration_access_token as string)
    expect([patch.status, patch.headers.get('allow')]).toEqual([405, 'POST, GET, PUT, DELETE'])
  })

  it('updates with the registration access token (RFC 7592 §2.2): the whole metadata replaced and checked as a registration is; the new redirect URI works, the old one no longer', async (context) => {
    const gateway = await start(context)
    const first = (await register(gateway, NATIVE_APP)).body
    const uri = first.registration_client_uri as string
    const token = first.registration_access_token as string
    const other = 'http://127.0.0.1/other'
    // What the server set is sent back as read, and ignored; client_name left out is no longer registered.
    const { client_name: _name, ...rest } = first
    const updated = await manage(uri, 'PUT', token, { ...rest, redirect_uris: [other] })
    expect(updated.status).toBe(200)
    expect(updated.headers.get('cache-control')).toBe('no-store')
    expect(updated.body).toMatchObject({ client_id: first.client_id, redirect_uris: [other], registration_access_token: token, registration_client_uri: uri })
    expect(updated.body).not.toHaveProperty('client_name')
    expect((await manage(uri, 'GET', token)).body).toEqual(updated.body)
    expect(auditEvents(gateway, 'client.registration_updated')).toEqual([expect.objectContaining({ client_id: first.client_id, redirect_uris: [other], ip: '127.0.0.1' })])
    const authorize = (redirectUri: string) => fetch(`${gateway.url}/authorize?${new URLSearchParams({
      response_type: 'code', client_id: first.client_id as string, redirect_uri: redirectUri, state: 's', scope: 'orders:read',
      code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWAVhasAtZ1Ew', code_challenge_method: 'S256' })}`, { redirect: 'manual' })
    expect((await authorize(LOOPBACK)).status).toBe(400)
    expect((await authorize(other)).status).toBe(302)
  })

  it('refuses an update the policy or RFC 7592 refuses, changing nothing: another client_id or none, another auth method, a wrong secret, a grant the policy refuses, an array, a string, a body past 32 KiB, not JSON, a wrong token', async (context) => {
    const gateway = await start(context, MACHINE_POLICY)
    const machine = (await register(gateway, MACHINE, { token: IAT })).body
    const uri = machine.registration_client_uri as string
    const token = machine.registration_access_token as string
    const { registration_access_token: _t, registration_client_uri: _u, client_secret: secret, ...mine } = machine
    const before = (await manage(uri, 'GET', token)).body
    for (const [body, error] of [
      [{ ...mine, client_id: 'dcr_someone_else' }, /client_id must be the registered client's/],
      [{ ...mine, client_id: undefined }, /client_id must be the registered client's/],
      [{ ...mine, token_endpoint_auth_method: 'client_secret_post' }, /token_endpoint_auth_method cannot change/],
      [{ ...mine, client_secret: 'not-the-secret' }, /client_secret is not the registered client's/],
      [{ ...mine, grant_types: ['password'] }, /grant_types/],
    ] as const) {
      const refused = await manage(uri, 'PUT', token, body)
      expect([refused.status, refused.body.error], JSON.stringify(body)).toEqual([400, 'invalid_client_metadata'])
      expect(refused.body.error_description).toMatch(error)
    }
    for (const body of [[mine], 'a string', { ...mine, client_name: 'x'.repeat(40 * 1024) }]) {
      const refused = await manage(uri, 'PUT', token, body)
      expect([refused.status, refused.body.error], JSON.stringify(body).slice(0, 60)).toEqual([400, 'invalid_client_metadata'])
    }
    expect((await manage(uri, 'PUT', `${token}x`, mine)).status).toBe(401)
    const notJson = await fetch(uri, { method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' }, body: '{}' })
    expect(notJson.status).toBe(400)
    // Nothing changed: the registration reads as before, and its secret still works.
    expect((await manage(uri, 'GET', token)).body).toEqual(before)
    const credentials = { authorization: basic(machine.client_id as string, secret as string) }
    expect((await postForm(gateway, '/token', { grant_type: 'client_credentials' }, credentials)).status).toBe(200)
    // The client's own secret may be sent with a good update.
    const renamed = await manage(uri, 'PUT', token, { ...mine, client_secret: secret, client_name: 'Nightly job, renamed' })
    expect([renamed.status, renamed.body.client_name]).toEqual([200, 'Nightly job, renamed'])
    expect(renamed.body).not.toHaveProperty('client_secret')
    expect((await postForm(gateway, '/token', { grant_type: 'client_credentials' }, credentials)).status).toBe(200)
    expect(auditEvents(gateway, 'client.registration_updated')).toHaveLength(1)
  })

  it('deletes with the registration access token: 204, then the client is unknown everywhere and its token no longer works', async (context) => {
    const gateway = await start(context, MACHINE_POLICY)
    const machine = (await register(gateway, MACHINE, { token: IAT })).body
    const native = (await register(gateway, NATIVE_APP, { token: IAT })).body
    const credentials = { authorization: basic(machine.client_id as string, machine.client_secret as string) }
    expect((await postForm(gateway, '/token', { grant_type: 'client_credentials' }, credentials)).status).toBe(200)
    expect((await manage(machine.registration_client_uri as string, 'DELETE', native.registration_access_token as string)).status).toBe(401)

    const deleted = await manage(machine.registration_client_uri as string, 'DELETE', machine.registration_access_token as string)
    expect([deleted.status, deleted.text]).toEqual([204, ''])
    expect(auditEvents(gateway, 'client.registration_deleted')).toEqual([expect.objectContaining({ client_id: machine.client_id, ip: '127.0.0.1' })])
    const after = await postForm(gateway, '/token', { grant_type: 'client_credentials' }, credentials)
    expect([after.status, after.body.error]).toEqual([401, 'invalid_client'])
    expect((await manage(machine.registration_client_uri as string, 'GET', machine.registration_access_token as string)).status).toBe(401)
    expect((await manage(machine.registration_client_uri as string, 'DELETE', machine.registration_access_token as string)).status).toBe(401)
    expect((await storedRegistrations(gateway)).map((record) => record.id)).toEqual([native.client_id])

    await manage(native.registration_client_uri as string, 'DELETE', native.registration_access_token as string)
    const page = await fetch(`${gateway.url}/authorize?${new URLSearchParams({ response_type: 'code', client_id: native.client_id as string, redirect_uri: LOOPBACK, state: 's' })}`,
      { redirect: 'manual' })
    expect([page.status, page.headers.get('location')]).toEqual([400, null])
  })
})

describe('YAML clients and registrations', () => {
  it('a registration never takes a YAML client_id: a client_id or secret in the body is ignored, and the YAML client is unchanged', async (context) => {
    const gateway = await start(context)
    const res = await register(gateway, { ...NATIVE_APP, client_id: 'spa', client_secret: 'chosen-by-the-client-0123' })
    expect(res.status).toBe(201)
    expect(res.body.client_id).not.toBe('spa')
    expect(res.body).not.toHaveProperty('client_secret')
    expect((await storedRegistrations(gateway)).map((record) => record.id)).toEqual([res.body.client_id])
    expect(gateway.app.authServer!.ctx.clients.find('spa')!.redirectUris).toEqual(['https://app.example.com/callback'])
  })

  it('a registration stored under a YAML client_id (a clash forced into the store) is never used: the YAML client wins, RFC 7592 refuses it', async (context) => {
    const gateway = await start(context)
    const real = (await register(gateway, NATIVE_APP)).body
    const { store, clients } = gateway.app.authServer!.ctx
    const [stored] = await store.list('registered_client')
    // The registration's record, its secrets and all, copied under the YAML client's id.
    await store.upsert('registered_client', 'spa', stored!.value, 3600)
    const client = await clients.lookup('spa')
    expect([client?.redirectUris, client?.dynamic]).toEqual([['https://app.example.com/callback'], undefined])
    const refused = await manage(`${gateway.url}/register?client_id=spa`, 'GET', real.registration_access_token as string)
    expect(refused.status).toBe(401)
    const page = await fetch(`${gateway.url}/authorize?${new URLSearchParams({ response_type: 'code', client_id: 'spa', redirect_uri: LOOPBACK, state: 's' })}`,
      { redirect: 'manual' })
    expect([page.status, page.headers.get('location')]).toEqual([400, null])
  })
})
