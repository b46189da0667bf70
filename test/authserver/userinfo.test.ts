/** OIDC Core §5.3 /userinfo (checklist §10) through the real gateway and its embedded server. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, RS, basic, postForm, type OAuthResponse } from '../support/authserver.js'

const OIDC_APP = { client_id: 'oidc-app', client_secret: 'oidc-secret-0123456789' }
const CLAIMS = {
  name: 'Alice Liddell', given_name: 'Alice', nickname: 'al', email: 'alice@example.com', email_verified: true,
  department: 'wonderland', phone_number: '+1 555 0100',
}

function setup(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    access_token: { audience: ['orders-api'] },
    clients: [
      { ...OIDC_APP, grant_types: ['password', 'refresh_token'], first_party: true,
        scopes: ['openid', 'profile', 'email', 'orders:read'] },
      { ...RS, grant_types: ['client_credentials'], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, sub: 'user-alice-1', claims: CLAIMS }],
    ...extra,
  }
}

let clock = Date.now()
let gateway: RunningGateway & { issuer: string }
let opaque: RunningGateway & { issuer: string }
beforeAll(async () => {
  gateway = await startAuthServerGateway(setup(), {}, { now: () => clock })
  opaque = await startAuthServerGateway(setup({ access_token: { audience: ['orders-api'], format: 'opaque' } }), {}, { now: () => clock })
})
afterAll(async () => {
  await gateway.close()
  await opaque.close()
})

async function tokenFor(scope: string, server = gateway): Promise<string> {
  const res = await postForm(server, '/token', { grant_type: 'password', ...ALICE, scope },
    { authorization: basic(OIDC_APP.client_id, OIDC_APP.client_secret) })
  expect(res.status).toBe(200)
  return (res.body as { access_token: string }).access_token
}

async function userinfo(init: { method?: string; headers?: Record<string, string>; body?: string; query?: string } = {},
  server = gateway): Promise<OAuthResponse> {
  const res = await fetch(`${server.url}/userinfo${init.query ?? ''}`, {
    method: init.method ?? 'GET',
    headers: init.headers ?? {},
    ...(init.body !== undefined && { body: init.body }),
  })
  const text = await res.text()
  let body: Record<string, unknown> = {}
  try { body = text === '' ? {} : JSON.parse(text) as Record<string, unknown> } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body, text }
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
const form = (fields: Record<string, string>) => ({
  method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString(),
})

describe('/userinfo', () => {
  it('UI-01 accepts the Bearer header on GET and POST (any case of the scheme) and a form access_token on POST', async () => {
    const token = await tokenFor('openid')
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      const res = await userinfo({ headers: { authorization: `${scheme} ${token}` } })
      expect([res.status, res.body]).toEqual([200, { sub: 'user-alice-1' }])
    }
    const post = await userinfo({ method: 'POST', headers: bearer(token) })
    expect([post.status, post.body.sub]).toEqual([200, 'user-alice-1'])
    const inForm = await userinfo(form({ access_token: token }))
    expect([inForm.status, inForm.body.sub]).toEqual([200, 'user-alice-1'])
  })

  it('UI-01 ignores a query access_token (401 without error) and refuses two methods or a repeated parameter with 400', async () => {
    const token = await tokenFor('openid')
    for (const method of ['GET', 'POST']) {
      const res = await userinfo({ method, query: `?access_token=${token}` })
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toBe(`Bearer realm="${gateway.issuer}"`)
    }
    // The query is ignored, so a header plus the query is one method.
    expect((await userinfo({ headers: bearer(token), query: `?access_token=${token}` })).status).toBe(200)
    const both = await userinfo({ ...form({ access_token: token }), headers: { ...form({}).headers, ...bearer(token) } })
    expect([both.status, both.body.error]).toEqual([400, 'invalid_request'])
    expect(both.headers.get('www-authenticate')).toMatch(new RegExp(`^Bearer realm="${gateway.issuer}", error="invalid_request"`))
    const repeated = await userinfo({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `access_token=${token}&access_token=${token}` })
    expect([repeated.status, repeated.body.error]).toEqual([400, 'invalid_request'])
    const json = await userinfo({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ access_token: token }) })
    expect([json.status, json.body.error]).toEqual([400, 'invalid_request'])
    const put = await userinfo({ method: 'PUT', headers: bearer(token) })
    expect(put.status).toBe(405)
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST')
  })

  it('G-12 a browser app may call userinfo cross-origin: a CORS preflight, and Access-Control-Allow-Origin on answers', async () => {
    const preflight = await fetch(`${gateway.url}/userinfo`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example.com', 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-origin')).toBe('*')
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, HEAD, POST')
    expect(preflight.headers.get('access-control-allow-headers')).toContain('authorization')
    const refused = await userinfo({})
    expect(refused.status).toBe(401)
    expect(refused.headers.get('access-control-allow-origin')).toBe('*')
    // The challenge must be readable by the app's script to know why.
    expect(refused.headers.get('access-control-expose-headers')).toContain('www-authenticate')
  })

  it('UI-02 answers 401 with a bare Bearer challenge when no token is sent', async () => {
    for (const init of [{}, { method: 'POST' }, form({}), { headers: { authorization: 'Basic Zm9vOmJhcg==' } }]) {
      const res = await userinfo(init)
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toBe(`Bearer realm="${gateway.issuer}"`)
      expect(res.headers.get('cache-control')).toBe('no-store')
      expect(res.headers.get('content-type')).toMatch(/^application\/json/)
      expect(res.body.error).toBe('unauthorized')
    }
  })

  it('UI-03 answers 401 invalid_token for unknown, tampered, revoked, expired and client_credentials tokens', async () => {
    const expectInvalid = async (token: string, server = gateway) => {
      const res = await userinfo({ headers: bearer(token) }, server)
      expect([res.status, res.body.error]).toEqual([401, 'invalid_token'])
      expect(res.headers.get('www-authenticate'))
        .toMatch(new RegExp(`^Bearer realm="${server.issuer}", error="invalid_token", error_description="[^"]+"$`))
    }
    await expectInvalid('nonsense')
    await expectInvalid('a.b.c')
    const token = await tokenFor('openid profile')
    await expectInvalid(token.slice(0, -4) + (token.endsWith('AAAA') ? 'BBBB' : 'AAAA'))

    // Revoked through /revoke.
    const revoked = await tokenFor('openid')
    expect((await postForm(gateway, '/revoke', { token: revoked }, { authorization: basic(OIDC_APP.client_id, OIDC_APP.client_secret) })).status).toBe(200)
    await expectInvalid(revoked)
    const revokedOpaque = await tokenFor('openid', opaque)
    expect((await postForm(opaque, '/revoke', { token: revokedOpaque }, { authorization: basic(OIDC_APP.client_id, OIDC_APP.client_secret) })).status).toBe(200)
    await expectInvalid(revokedOpaque, opaque)

    // A client_credentials token: its sub is the client, not a user.
    const cc = await postForm(gateway, '/token', { grant_type: 'client_credentials' }, { authorization: basic(RS.client_id, RS.client_secret) })
    expect(cc.status).toBe(200)
    await expectInvalid((cc.body as { access_token: string }).access_token)

    // Expired, JWT and opaque.
    const jwt = await tokenFor('openid')
    const opaqueToken = await tokenFor('openid', opaque)
    expect((await userinfo({ headers: bearer(opaqueToken) }, opaque)).status).toBe(200)
    const saved = clock
    clock += 2 * 24 * 3600 * 1000
    try {
      await expectInvalid(jwt)
      await expectInvalid(opaqueToken, opaque)
    } finally {
      clock = saved
    }
  })

  it('UI-03 answers 403 insufficient_scope with scope="openid" for a token without openid', async () => {
    const token = await tokenFor('profile email orders:read')
    const res = await userinfo({ headers: bearer(token) })
    expect([res.status, res.body.error]).toEqual([403, 'insufficient_scope'])
    expect(res.headers.get('www-authenticate')).toMatch(
      new RegExp(`^Bearer realm="${gateway.issuer}", error="insufficient_scope", error_description="[^"]+", scope="openid"$`))
  })

  it('UI-04 answers 200 JSON, no-store, with sub and only the claims of the granted scopes', async () => {
    const cases: [string, Record<string, unknown>][] = [
      ['openid', { sub: 'user-alice-1' }],
      ['openid orders:read', { sub: 'user-alice-1' }],
      ['openid profile', { sub: 'user-alice-1', name: 'Alice Liddell', given_name: 'Alice', nickname: 'al' }],
      ['openid email', { sub: 'user-alice-1', email: 'alice@example.com', email_verified: true }],
      ['openid profile email', { sub: 'user-alice-1', name: 'Alice Liddell', given_name: 'Alice', nickname: 'al',
        email: 'alice@example.com', email_verified: true }],
    ]
    for (const server of [gateway, opaque]) {
      for (const [scope, expected] of cases) {
        const token = await tokenFor(scope, server)
        for (const init of [{ headers: bearer(token) }, form({ access_token: token })]) {
          const res = await userinfo(init, server)
          expect(res.status).toBe(200)
          expect(res.headers.get('content-type')).toMatch(/^application\/json/)
          expect(res.headers.get('cache-control')).toBe('no-store')
          expect(res.headers.get('www-authenticate')).toBeNull()
          expect(res.body).toStrictEqual(expected)
        }
      }
    }
  })
})
