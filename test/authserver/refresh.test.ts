/**
 * grant_type=refresh_token (checklist §3.3) against the real server on loopback, and the gateway's
 * in-process trust of what the embedded server issues and revokes (issue 4, point 8).
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { decodeJwt } from 'jose'
import { startAuthServerGateway } from '../support/gateway.js'
import { APP, OTHER, RS, basic, callApi, passwordGrant, passwordSetup, postForm, refresh } from '../support/authserver.js'

async function start(context: TestContext, extra: Record<string, unknown> = {}, options: { now?: () => number } = {}) {
  const gateway = await startAuthServerGateway(passwordSetup(extra), {}, options)
  context.onTestFinished(() => gateway.close())
  return gateway
}

async function login(gateway: Awaited<ReturnType<typeof start>>, scope?: string) {
  const res = await passwordGrant(gateway, scope)
  expect(res.status).toBe(200)
  return res.body as { access_token: string; refresh_token: string; scope: string; expires_in: number }
}

async function introspect(gateway: Awaited<ReturnType<typeof start>>, token: string) {
  return (await postForm(gateway, '/introspect', { token }, { authorization: basic(RS.client_id, RS.client_secret) })).body
}

describe('refresh_token grant', () => {
  it('answers the seed request (client_id and client_secret in the form) with new tokens: RT-03 rotation', async (context) => {
    const gateway = await start(context)
    const first = await login(gateway)
    const res = await refresh(gateway, first.refresh_token)
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('pragma')).toBe('no-cache')
    expect(res.body).toMatchObject({ token_type: 'Bearer', scope: first.scope })
    expect(res.body.refresh_token).toMatch(/^prt_[A-Za-z0-9_-]{43}$/)
    expect(res.body.refresh_token).not.toBe(first.refresh_token)
    expect(res.body.access_token).not.toBe(first.access_token)
    expect(Number.isInteger(res.body.expires_in)).toBe(true)
  })

  it('RT-01 answers invalid_request without refresh_token and invalid_grant for an unknown one', async (context) => {
    const gateway = await start(context)
    const missing = await postForm(gateway, '/token', { grant_type: 'refresh_token', ...APP })
    expect([missing.status, missing.body.error]).toEqual([400, 'invalid_request'])
    const unknown = await refresh(gateway, 'prt_' + 'A'.repeat(43))
    expect([unknown.status, unknown.body.error]).toEqual([400, 'invalid_grant'])
  })

  it('RT-02 refuses another client\'s refresh token, and a confidential client without its secret', async (context) => {
    const gateway = await start(context)
    const { refresh_token } = await login(gateway)
    const stolen = await refresh(gateway, refresh_token, OTHER)
    expect([stolen.status, stolen.body.error]).toEqual([400, 'invalid_grant'])
    const anonymous = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token, client_id: APP.client_id })
    expect([anonymous.status, anonymous.body.error]).toEqual([401, 'invalid_client'])
    // Neither attempt consumed it: the owner can still refresh.
    expect((await refresh(gateway, refresh_token)).status).toBe(200)
  })

  it('RT-03 a rotated-out refresh token is invalid from then on', async (context) => {
    const gateway = await start(context)
    const { refresh_token } = await login(gateway)
    expect((await refresh(gateway, refresh_token)).status).toBe(200)
    const again = await refresh(gateway, refresh_token)
    expect([again.status, again.body.error]).toEqual([400, 'invalid_grant'])
  })

  it('RT-04 reuse of a rotated refresh token revokes the family: the newest refresh token and every access token die', async (context) => {
    let clock = Date.now()
    const gateway = await start(context, {}, { now: () => clock })
    const first = await login(gateway)
    const second = (await refresh(gateway, first.refresh_token)).body as { access_token: string; refresh_token: string }
    expect((await callApi(gateway, second.access_token)).status).toBe(200)  // now in the gateway's cache
    clock += 3000  // any time later: a replay
    const reuse = await refresh(gateway, first.refresh_token)
    expect([reuse.status, reuse.body.error]).toEqual([400, 'invalid_grant'])
    const newest = await refresh(gateway, second.refresh_token)
    expect([newest.status, newest.body.error]).toEqual([400, 'invalid_grant'])
    for (const token of [first.access_token, second.access_token]) {
      expect(await introspect(gateway, token)).toEqual({ active: false })
      const res = await callApi(gateway, token)
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"')
    }
  })

  it('RT-04 with opaque access tokens: the family\'s tokens are refused by the gateway at once', async (context) => {
    let clock = Date.now()
    const gateway = await start(context, { access_token: { format: 'opaque', audience: ['orders-api'] } }, { now: () => clock })
    const first = await login(gateway)
    expect(first.access_token).toMatch(/^pat_/)
    expect((await callApi(gateway, first.access_token)).status).toBe(200)
    const second = (await refresh(gateway, first.refresh_token)).body as { access_token: string }
    clock += 3000
    expect((await refresh(gateway, first.refresh_token)).status).toBe(400)
    expect((await callApi(gateway, first.access_token)).status).toBe(401)
    expect((await callApi(gateway, second.access_token)).status).toBe(401)
  })

  it('RT-05 twenty parallel refreshes of one token (no grace): exactly one 200, and afterwards every token of the family is dead, the winner\'s too (issue 16)', async (context) => {
    const gateway = await start(context)
    const first = await login(gateway)
    const results = await Promise.all(Array.from({ length: 20 }, () => refresh(gateway, first.refresh_token)))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    expect(results.filter((res) => res.status === 400 && res.body.error === 'invalid_grant')).toHaveLength(19)
    // RFC 9700 §4.14.2: the losers presented a rotated-out token, which revokes the family; the server cannot
    // tell a racing client from a thief who refreshed first.
    const winner = results.find((res) => res.status === 200)!.body as { access_token: string; refresh_token: string }
    const next = await refresh(gateway, winner.refresh_token)
    expect([next.status, next.body.error]).toEqual([400, 'invalid_grant'])
    for (const token of [first.access_token, winner.access_token]) {
      expect(await introspect(gateway, token)).toEqual({ active: false })
      expect((await callApi(gateway, token)).status).toBe(401)
    }
  })

  it('RT-04 a replay at once, without waiting, revokes the family: the refresh token just issued is dead (issue 16)', async (context) => {
    const gateway = await start(context)
    const first = await login(gateway)
    const second = (await refresh(gateway, first.refresh_token)).body as { access_token: string; refresh_token: string }
    const replay = await refresh(gateway, first.refresh_token)
    expect([replay.status, replay.body.error]).toEqual([400, 'invalid_grant'])
    const newest = await refresh(gateway, second.refresh_token)
    expect([newest.status, newest.body.error]).toEqual([400, 'invalid_grant'])
    expect((await callApi(gateway, second.access_token)).status).toBe(401)
  })

  it('RT-06 narrows the access token\'s scope, refuses widening, and the new refresh token keeps the whole scope', async (context) => {
    const gateway = await start(context)
    const first = await login(gateway, 'orders:read orders:write')
    const narrowed = await refresh(gateway, first.refresh_token, APP, 'orders:read')
    expect(narrowed.status).toBe(200)
    expect(narrowed.body.scope).toBe('orders:read')
    expect(decodeJwt(narrowed.body.access_token as string).scope).toBe('orders:read')
    const widened = await refresh(gateway, narrowed.body.refresh_token as string, APP, 'orders:read profile')
    expect([widened.status, widened.body.error]).toEqual([400, 'invalid_scope'])
    // The refused request consumed nothing: the same refresh token, without scope, gets the grant's whole scope back.
    const whole = await refresh(gateway, narrowed.body.refresh_token as string)
    expect(whole.status).toBe(200)
    expect(whole.body.scope).toBe('orders:read orders:write')
  })

  it('RT-08 rotation never extends the grant: refresh tokens stop at grant start + refresh_token.ttl', async (context) => {
    let clock = Date.now()
    const gateway = await start(context, { refresh_token: { ttl: '1h' } }, { now: () => clock })
    const first = await login(gateway)
    clock += 50 * 60_000
    const second = await refresh(gateway, first.refresh_token)
    expect(second.status).toBe(200)
    expect(second.body.expires_in as number).toBeLessThanOrEqual(10 * 60)  // the access token is capped by the grant too
    clock += 11 * 60_000
    const late = await refresh(gateway, second.body.refresh_token as string)
    expect([late.status, late.body.error]).toEqual([400, 'invalid_grant'])
  })

  it('RT-09 a refresh token revoked through /revoke answers invalid_grant', async (context) => {
    const gateway = await start(context)
    const { refresh_token } = await login(gateway)
    const revoked = await postForm(gateway, '/revoke', { token: refresh_token, ...APP })
    expect(revoked.status).toBe(200)
    const res = await refresh(gateway, refresh_token)
    expect([res.status, res.body.error]).toEqual([400, 'invalid_grant'])
  })
})

describe('the gateway trusts the embedded issuer in-process', () => {
  it('accepts its JWT access tokens on a protected route and sets identity headers from them', async (context) => {
    const gateway = await start(context)
    const { access_token } = await login(gateway, 'orders:read')
    const res = await callApi(gateway, access_token)
    expect(res.status).toBe(200)
    const echoed = await res.json() as { headers: Record<string, string> }
    expect(echoed.headers['x-auth-subject']).toBe('alice')
    expect(echoed.headers['x-auth-client-id']).toBe(APP.client_id)
    expect(echoed.headers['x-auth-scopes']).toBe('orders:read')
    expect(echoed.headers['x-auth-issuer']).toBe(gateway.issuer)
    // In-process: the JWKS endpoint was never fetched over HTTP by the gateway.
    expect(gateway.logs.join('')).not.toContain('issuer key set changed')
  })

  it('RV-07 rejects a revoked JWT access token (jti deny-listed until exp) on the very next request, though it was cached', async (context) => {
    const gateway = await start(context)
    const { access_token } = await login(gateway)
    expect((await callApi(gateway, access_token)).status).toBe(200)
    expect((await postForm(gateway, '/revoke', { token: access_token, token_type_hint: 'access_token', ...APP })).status).toBe(200)
    const res = await callApi(gateway, access_token)
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"')
  })

  it('RV-02 rejects a revoked opaque access token on the very next request', async (context) => {
    const gateway = await start(context, { access_token: { format: 'opaque', audience: ['orders-api'] } })
    const { access_token } = await login(gateway)
    expect((await callApi(gateway, access_token)).status).toBe(200)
    expect((await postForm(gateway, '/revoke', { token: access_token, ...APP })).status).toBe(200)
    expect((await callApi(gateway, access_token)).status).toBe(401)
    expect(await introspect(gateway, access_token)).toEqual({ active: false })
  })

  it('rejects every access token of a refresh family revoked through /revoke (RV-03)', async (context) => {
    const gateway = await start(context)
    const first = await login(gateway)
    const second = (await refresh(gateway, first.refresh_token)).body as { access_token: string; refresh_token: string }
    for (const token of [first.access_token, second.access_token]) expect((await callApi(gateway, token)).status).toBe(200)
    expect((await postForm(gateway, '/revoke', { token: second.refresh_token, ...APP })).status).toBe(200)
    for (const token of [first.access_token, second.access_token]) expect((await callApi(gateway, token)).status).toBe(401)
  })

  it('refuses a token of the embedded issuer whose audience is not the configured one', async (context) => {
    const gateway = await start(context)
    const { access_token } = await login(gateway)
    const other = await startAuthServerGateway(passwordSetup({ access_token: { audience: ['billing-api'] } }))
    context.onTestFinished(() => other.close())
    // Another server's token (other keys, other issuer) is not ours.
    const foreign = (await passwordGrant(other)).body.access_token as string
    expect((await callApi(gateway, foreign)).status).toBe(401)
    expect((await callApi(gateway, access_token)).status).toBe(200)
  })
})
