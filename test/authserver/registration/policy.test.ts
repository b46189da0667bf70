/**
 * Issue 19: what a client may register (RFC 7591 §2, §3.2.2; RFC 8252 §7; checklist A-06), against the real
 * gateway: every refusal with its error code, each one storing nothing and auditing nothing; the values the
 * server substitutes; body limits; registrations per address (429); browser apps (CORS); `portcullis check`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { loadConfig } from '../../../src/check/load.js'
import { configWarnings } from '../../../src/check/lint.js'
import { configProblems } from '../../support/config-problems.js'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { IAT, LOOPBACK, NATIVE_APP, auditEvents, register, registrationSetup, storedRegistrations } from '../../support/registration.js'

const HTTPS = 'https://app.example.com/cb'
const code = (redirectUris: unknown, extra: Record<string, unknown> = {}) =>
  ({ token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], redirect_uris: redirectUris, ...extra })
const machine = (extra: Record<string, unknown> = {}) =>
  ({ token_endpoint_auth_method: 'client_secret_basic', grant_types: ['client_credentials'], ...extra })

/** Each with the error it must get (RFC 7591 §3.2.2) from the permissive gateway below. */
const REFUSED: ReadonlyArray<[string, unknown, 'invalid_redirect_uri' | 'invalid_client_metadata']> = [
  ['a fragment', code([`${HTTPS}#frag`]), 'invalid_redirect_uri'],
  ['http off loopback', code(['http://app.example.com/cb']), 'invalid_redirect_uri'],
  ['http://localhost, which the default forms leave out (A-04; opt-in: test/authserver/registration/localhost-redirect.test.ts)', code(['http://localhost:8080/cb']), 'invalid_redirect_uri'],
  ['javascript:', code(['javascript:alert(1)']), 'invalid_redirect_uri'],
  ['JavaScript: in another case', code(['JavaScript:alert(1)']), 'invalid_redirect_uri'],
  ['data:', code(['data:text/html,<script>alert(1)</script>']), 'invalid_redirect_uri'],
  ['an uppercase scheme', code(['HTTPS://app.example.com/cb']), 'invalid_redirect_uri'],
  ['a wildcard', code(['https://*.example.com/cb']), 'invalid_redirect_uri'],
  ['a relative URI', code(['/callback']), 'invalid_redirect_uri'],
  ['user information', code(['https://evil.test@app.example.com/cb']), 'invalid_redirect_uri'],
  ['a private-use scheme that is no reverse domain', code(['myapp:/callback']), 'invalid_redirect_uri'],
  ['a loopback port the redirect could never match', code(['http://127.0.0.1:0/cb']), 'invalid_redirect_uri'],
  ['a space', code(['https://app.example.com/a b']), 'invalid_redirect_uri'],
  ['non-ASCII', code(['https://app.example.com/é']), 'invalid_redirect_uri'],
  ['an over-long URI', code([`${HTTPS}/${'a'.repeat(2000)}`]), 'invalid_redirect_uri'],
  ['more URIs than max_redirect_uris', code(Array.from({ length: 6 }, (_, i) => `${HTTPS}${i}`)), 'invalid_redirect_uri'],
  ['authorization_code without redirect_uris', code(undefined), 'invalid_redirect_uri'],
  ['redirect_uris that are not an array', code(HTTPS), 'invalid_redirect_uri'],
  ['an unknown grant type', code([HTTPS], { grant_types: ['urn:example:grant'] }), 'invalid_client_metadata'],
  ['the password grant', code([HTTPS], { grant_types: ['password'] }), 'invalid_client_metadata'],
  ['implicit', code([HTTPS], { grant_types: ['implicit'] }), 'invalid_client_metadata'],
  ['grant_types that are not an array', code([HTTPS], { grant_types: 'authorization_code' }), 'invalid_client_metadata'],
  ['a public client asking for client_credentials', machine({ token_endpoint_auth_method: 'none' }), 'invalid_client_metadata'],
  ['refresh_token alone', code([HTTPS], { grant_types: ['refresh_token'] }), 'invalid_client_metadata'],
  ['private_key_jwt', code([HTTPS], { token_endpoint_auth_method: 'private_key_jwt' }), 'invalid_client_metadata'],
  ['response_types token', code([HTTPS], { response_types: ['token'] }), 'invalid_client_metadata'],
  ['response_types code without authorization_code', machine({ response_types: ['code'] }), 'invalid_client_metadata'],
  ['redirect_uris without authorization_code', machine({ redirect_uris: [HTTPS] }), 'invalid_client_metadata'],
  ['only scopes the policy does not allow', code([HTTPS], { scope: 'admin' }), 'invalid_client_metadata'],
  ['a malformed scope', code([HTTPS], { scope: 'orders:read  orders:write' }), 'invalid_client_metadata'],
  ['a client_name over max_name_length', code([HTTPS], { client_name: 'n'.repeat(101) }), 'invalid_client_metadata'],
  ['a client_name with a control character', code([HTTPS], { client_name: 'Bank\nLogin' }), 'invalid_client_metadata'],
  ['a client_name with a bidi override', code([HTTPS], { client_name: 'Good\u202eliveB' }), 'invalid_client_metadata'],
  ['a client_name that is no string', code([HTTPS], { client_name: 42 }), 'invalid_client_metadata'],
  ['an over-long software_id', code([HTTPS], { software_id: 's'.repeat(256) }), 'invalid_client_metadata'],
  ['an ID token alg without a key', code([HTTPS], { id_token_signed_response_alg: 'HS256' }), 'invalid_client_metadata'],
  ['a body that is not JSON', '{"redirect_uris": [', 'invalid_client_metadata'],
  ['a JSON array', JSON.stringify([NATIVE_APP]), 'invalid_client_metadata'],
  ['a JSON string', '"register me"', 'invalid_client_metadata'],
  ['an empty body', '', 'invalid_client_metadata'],
  ['a 40 KiB body', { ...NATIVE_APP, padding: 'x'.repeat(40 * 1024) }, 'invalid_client_metadata'],
]

describe('registration policy (RFC 7591 §3.2.2)', () => {
  let gateway: RunningGateway
  let restrictive: RunningGateway
  beforeAll(async () => {
    ;[gateway, restrictive] = await Promise.all([
      startAuthServerGateway(registrationSetup({
        initial_access_token: IAT, policy: { grant_types: ['authorization_code', 'refresh_token', 'client_credentials'] },
      })),
      startAuthServerGateway(registrationSetup({ policy: { client_types: ['public'], redirect_uris: ['loopback'], grant_types: ['authorization_code'] } })),
    ])
  })
  afterAll(() => Promise.all([gateway.close(), restrictive.close()]))

  it.each(REFUSED)('refuses %s with 400 %s, storing and auditing nothing', async (_name, body, error) => {
    const res = await register(gateway, body, { token: IAT })
    expect([res.status, res.body.error], res.text).toEqual([400, error])
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.body.error_description).toMatch(/^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/)
    expect(await storedRegistrations(gateway)).toEqual([])
    expect(auditEvents(gateway, 'client.registered')).toEqual([])
  })

  it('refuses a body that is not application/json before reading it, and says so', async () => {
    const res = await register(gateway, new URLSearchParams({ redirect_uris: HTTPS }).toString(),
      { token: IAT, headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expect([res.status, res.body.error]).toEqual([400, 'invalid_client_metadata'])
    expect(await storedRegistrations(gateway)).toEqual([])
  })

  it('refuses what the restrictive policy leaves out: confidential clients, https, private-use and localhost URIs, other grants', async () => {
    for (const [body, error] of [
      [code([LOOPBACK], { token_endpoint_auth_method: 'client_secret_basic' }), 'invalid_client_metadata'],
      [code([HTTPS]), 'invalid_redirect_uri'],
      [code(['com.example.app:/callback']), 'invalid_redirect_uri'],
      [code(['http://localhost:8080/callback']), 'invalid_redirect_uri'],
      [code([LOOPBACK], { grant_types: ['authorization_code', 'refresh_token'] }), 'invalid_client_metadata'],
    ] as const) {
      const res = await register(restrictive, body)
      expect([res.status, res.body.error], JSON.stringify(body)).toEqual([400, error])
    }
    expect(await storedRegistrations(restrictive)).toEqual([])
  })

  it('fills in RFC 7591 defaults: authorization_code, code, and client_secret_basic where confidential clients may register, else none', async () => {
    const confidential = await register(gateway, { redirect_uris: [HTTPS] }, { token: IAT })
    expect(confidential.status).toBe(201)
    expect(confidential.body).toMatchObject({
      grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic',
      client_secret: expect.any(String) as unknown, client_secret_expires_at: 0, scope: 'orders:read orders:write',
    })
    const publicOnly = await register(restrictive, { redirect_uris: [LOOPBACK] })
    expect(publicOnly.body).toMatchObject({ token_endpoint_auth_method: 'none', grant_types: ['authorization_code'] })
    expect(publicOnly.body).not.toHaveProperty('client_secret')
  })

  it('registers only the allowed part of the requested scope, ignores what it does not use, and reads null as omitted', async () => {
    const res = await register(gateway, {
      ...code([HTTPS, 'com.example.app:/oauth2redirect', LOOPBACK]), scope: 'admin orders:read', client_name: null,
      logo_uri: 'https://evil.test/logo.png', contacts: ['a@example.com'], software_statement: 'eyJ.x.y', jwks: { keys: [] },
      software_id: 'cli-tool', software_version: '1.2.3',
    }, { token: IAT })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ scope: 'orders:read', redirect_uris: [HTTPS, 'com.example.app:/oauth2redirect', LOOPBACK],
      software_id: 'cli-tool', software_version: '1.2.3' })
    for (const ignored of ['client_name', 'logo_uri', 'contacts', 'software_statement', 'jwks']) expect(res.body).not.toHaveProperty(ignored)
    const empty = await register(gateway, code([HTTPS], { scope: '' }), { token: IAT })
    expect(empty.body.scope).toBe('')
  })
})

describe('registrations per address', () => {
  it('answers 429 with Retry-After past registration.rate; refused registrations do not count', async ({ onTestFinished }) => {
    const gateway = await startAuthServerGateway(registrationSetup({ rate: { registrations: 2, window: '1h' } }))
    onTestFinished(() => gateway.close())
    expect((await register(gateway, code(['http://example.com/cb']))).status).toBe(400)
    expect((await register(gateway, NATIVE_APP)).status).toBe(201)
    expect((await register(gateway, NATIVE_APP)).status).toBe(201)
    const limited = await register(gateway, NATIVE_APP)
    expect([limited.status, limited.body.error]).toEqual([429, 'temporarily_unavailable'])
    expect(limited.body.error_description).toBe('too many registrations from this address; retry later')
    const retryAfter = Number(limited.headers.get('retry-after'))
    expect(retryAfter).toBeGreaterThan(3500)
    expect(retryAfter).toBeLessThanOrEqual(3600)
    expect(await storedRegistrations(gateway)).toHaveLength(2)
    expect(auditEvents(gateway, 'throttle.engaged')).toEqual([expect.objectContaining({ throttle: 'registrations', key: 'ip:127.0.0.1' })])
  })
})

describe('browser apps (CORS)', () => {
  it('answers the preflight and lets a page read the registration response', async ({ onTestFinished }) => {
    const gateway = await startAuthServerGateway(registrationSetup())
    onTestFinished(() => gateway.close())
    const preflight = await fetch(`${gateway.url}/register`, {
      method: 'OPTIONS', headers: { origin: 'https://inspector.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*')
    expect(preflight.headers.get('access-control-allow-methods')).toBe('POST, GET, PUT, DELETE')
    const res = await register(gateway, NATIVE_APP, { headers: { origin: 'https://inspector.example' } })
    expect([res.status, res.headers.get('access-control-allow-origin')]).toEqual([201, '*'])
  })
})

describe('portcullis check: registration', () => {
  const configWith = (registration: Record<string, unknown>) => stringify({
    upstreams: { echo: { url: 'builtin:echo' } },
    routes: [{ id: 'api', path: '/api/**', upstream: 'echo' }],
    authorization_server: { enabled: true, issuer: 'https://auth.example.com', store: { type: 'memory' }, registration: { enabled: true, ...registration } },
  })
  const problems = (registration: Record<string, unknown>) => configProblems(configWith(registration))

  it('refuses client_credentials for open registration or without confidential clients, refresh_token alone, a short unused_expiry, unknown keys', () => {
    const at = 'authorization_server.registration'
    expect(problems({ policy: { grant_types: ['client_credentials'] } })).toEqual([
      `${at}.policy.grant_types: client_credentials with open registration lets anyone obtain tokens no user approved: set initial_access_token`])
    expect(problems({ initial_access_token: IAT, policy: { grant_types: ['client_credentials'], client_types: ['public'] } })).toEqual([
      `${at}.policy.grant_types: client_credentials needs confidential in policy.client_types (RFC 6749 §4.4)`])
    expect(problems({ policy: { grant_types: ['refresh_token'] } })).toEqual([
      `${at}.policy.grant_types: refresh_token needs a grant that issues refresh tokens (authorization_code or device_code)`])
    expect(problems({ unused_expiry: '30s' })).toEqual([`${at}.unused_expiry: must be at least 1m`])
    expect(problems({ policy: { grant_types: ['password'] } })).toHaveLength(1)
    expect(problems({ policy: { redirect_uris: ['http'] } })).toHaveLength(1)
    expect(problems({ policy: { redirect_uris: ['loopback', 'localhost'] } })).toEqual([])
    expect(problems({ initial_access_token: 'short' })).toEqual([`${at}.initial_access_token: must NOT have fewer than 16 characters`])
    expect(problems({ policy: { scopes: ['orders:read'] }, unused_expiry: '1d', rate: { registrations: 5, window: '10m' } })).toEqual([])
  })

  it('warns when registration is open and when it allows no scope', () => {
    const warnings = configWarnings(loadConfig('portcullis.yaml', configWith({}), {}))
    expect(warnings).toEqual(expect.arrayContaining([
      expect.stringMatching(/^authorization_server\.registration is open \(no initial_access_token\): anyone who can reach https:\/\/auth\.example\.com\/register/),
      'authorization_server.registration.policy.scopes is empty: registered clients can be given no scope',
    ]))
    expect(configWarnings(loadConfig('portcullis.yaml', configWith({ initial_access_token: IAT, policy: { scopes: ['a'] } }), {}))
      .filter((warning) => warning.includes('registration'))).toEqual([])
  })
})
