/** RFC 7009 /revoke (checklist §5) and RFC 7662 /introspect (checklist §6) against the real server. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { APP, OTHER, RS, basic, passwordGrant, passwordSetup, postForm, refresh } from '../support/authserver.js'

let gateway: RunningGateway & { issuer: string }
beforeAll(async () => { gateway = await startAuthServerGateway(passwordSetup()) })
afterAll(() => gateway.close())

const asRs = { authorization: basic(RS.client_id, RS.client_secret) }
const asApp = { authorization: basic(APP.client_id, APP.client_secret) }

async function login(scope?: string) {
  const res = await passwordGrant(gateway, scope)
  expect(res.status).toBe(200)
  return res.body as { access_token: string; refresh_token: string }
}

describe('/revoke', () => {
  it('RV-01 answers 401 invalid_client without client authentication and 400 invalid_request without token', async () => {
    const { access_token } = await login()
    const anonymous = await postForm(gateway, '/revoke', { token: access_token })
    expect([anonymous.status, anonymous.body.error]).toEqual([401, 'invalid_client'])
    const wrong = await postForm(gateway, '/revoke', { token: access_token }, { authorization: basic(APP.client_id, 'wrong-secret-000000') })
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_client'])
    expect(wrong.headers.get('www-authenticate')).toMatch(/^Basic realm="/)
    const missing = await postForm(gateway, '/revoke', {}, asApp)
    expect([missing.status, missing.body.error]).toEqual([400, 'invalid_request'])
  })

  it('RV-04 answers 200 for unknown, malformed and already-revoked tokens', async () => {
    const { access_token } = await login()
    for (const token of ['nonsense', 'prt_' + 'x'.repeat(43), 'a.b.c', access_token, access_token]) {
      const res = await postForm(gateway, '/revoke', { token }, asApp)
      expect(res.status).toBe(200)
    }
  })

  it('RV-05 works whatever token_type_hint says', async () => {
    for (const hint of ['access_token', 'refresh_token', 'foo']) {
      const { refresh_token } = await login()
      expect((await postForm(gateway, '/revoke', { token: refresh_token, token_type_hint: hint }, asApp)).status).toBe(200)
      expect((await refresh(gateway, refresh_token)).body.error).toBe('invalid_grant')
    }
  })

  it('RV-06 does not revoke another client\'s token, and still answers 200', async () => {
    const { refresh_token } = await login()
    const res = await postForm(gateway, '/revoke', { token: refresh_token, ...OTHER })
    expect(res.status).toBe(200)
    expect((await refresh(gateway, refresh_token)).status).toBe(200)
  })

  it('RV-03 revoking an access token leaves its refresh token alive', async () => {
    const { access_token, refresh_token } = await login()
    expect((await postForm(gateway, '/revoke', { token: access_token }, asApp)).status).toBe(200)
    expect((await refresh(gateway, refresh_token)).status).toBe(200)
  })

  it('RV-08 answers with an empty body, and only to POST (G-11)', async () => {
    const { access_token } = await login()
    const res = await postForm(gateway, '/revoke', { token: access_token }, asApp)
    expect(res.text).toBe('')
    expect(res.headers.get('content-length')).toBe('0')
    const get = await fetch(`${gateway.url}/revoke`)
    expect(get.status).toBe(405)
    expect(get.headers.get('allow')).toBe('POST')
  })
})

describe('/introspect', () => {
  it('IN-01 refuses public and unauthenticated callers with 401 invalid_client', async () => {
    const { access_token } = await login()
    const anonymous = await postForm(gateway, '/introspect', { token: access_token })
    expect([anonymous.status, anonymous.body.error]).toEqual([401, 'invalid_client'])
    const publicClient = await postForm(gateway, '/introspect', { token: access_token, client_id: 'public-app' })
    expect([publicClient.status, publicClient.body.error]).toEqual([401, 'invalid_client'])
  })

  it('IN-02 answers 400 invalid_request without token', async () => {
    const res = await postForm(gateway, '/introspect', {}, asRs)
    expect([res.status, res.body.error]).toEqual([400, 'invalid_request'])
  })

  it('IN-03 answers exactly {"active":false} for unknown, malformed, revoked and rotated-out tokens', async () => {
    const { access_token, refresh_token } = await login()
    expect((await refresh(gateway, refresh_token)).status).toBe(200)
    await postForm(gateway, '/revoke', { token: access_token }, asApp)
    for (const token of ['nonsense', 'a.b.c', access_token, refresh_token, 'pat_' + 'x'.repeat(43)]) {
      const res = await postForm(gateway, '/introspect', { token }, asApp)
      expect(res.status).toBe(200)
      expect(res.text).toBe('{"active":false}')
    }
  })

  it('IN-04 describes an active access token with its own claims, integer times, and no-store (IN-05)', async () => {
    const { access_token } = await login('orders:read')
    const res = await postForm(gateway, '/introspect', { token: access_token }, asApp)
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.body).toMatchObject({
      active: true, scope: 'orders:read', client_id: APP.client_id, token_type: 'Bearer', sub: 'alice', aud: 'orders-api', iss: gateway.issuer,
    })
    expect(Number.isInteger(res.body.exp) && Number.isInteger(res.body.iat)).toBe(true)
    expect(typeof res.body.jti).toBe('string')
  })

  it('IN-04 shows a refresh token to its own client only, without token_type', async () => {
    const { refresh_token } = await login()
    const own = await postForm(gateway, '/introspect', { token: refresh_token, token_type_hint: 'refresh_token' }, asApp)
    expect(own.body).toMatchObject({ active: true, client_id: APP.client_id, sub: 'alice' })
    expect(own.body.token_type).toBeUndefined()
    const other = await postForm(gateway, '/introspect', { token: refresh_token }, asRs)
    expect(other.text).toBe('{"active":false}')
  })

  it('IN-06 shows an access token only to its client or a client in its audience', async () => {
    const { access_token } = await login()
    const stranger = await postForm(gateway, '/introspect', { token: access_token }, { authorization: basic(OTHER.client_id, OTHER.client_secret) })
    expect(stranger.text).toBe('{"active":false}')
  })
})

describe('CORS', () => {
  it('G-12 allows cross-origin calls to /token and /revoke (preflight and response), never to /introspect', async () => {
    for (const path of ['/token', '/revoke']) {
      const preflight = await fetch(`${gateway.url}${path}`, {
        method: 'OPTIONS', headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' },
      })
      expect(preflight.status).toBe(204)
      expect(preflight.headers.get('access-control-allow-origin')).toBe('*')
      expect(preflight.headers.get('access-control-allow-methods')).toBe('POST')
      expect(preflight.headers.get('access-control-allow-headers')).toContain('authorization')
    }
    const token = await postForm(gateway, '/token', { grant_type: 'client_credentials' }, asRs)
    expect(token.headers.get('access-control-allow-origin')).toBe('*')
    const introspection = await postForm(gateway, '/introspect', { token: 'x' }, asRs)
    expect(introspection.headers.get('access-control-allow-origin')).toBeNull()
    expect((await fetch(`${gateway.url}/introspect`, { method: 'OPTIONS' })).status).toBe(405)
  })
})
