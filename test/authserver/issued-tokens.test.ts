/**
 * What the embedded server issues (checklist §9.1 AT-*, G-01, G-09) checked by a strict client
 * (oauth4webapi) and by inspection, and the RFC 7009 / 7662 request examples (TV-8, TV-9).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as oauth from 'oauth4webapi'
import { decodeJwt, decodeProtectedHeader } from 'jose'
import { randomToken } from '../../src/authserver/tokens.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { APP, RS, basic, callApi, passwordGrant, passwordSetup, postForm } from '../support/authserver.js'

let gateway: RunningGateway & { issuer: string }
let opaque: RunningGateway & { issuer: string }
beforeAll(async () => {
  [gateway, opaque] = await Promise.all([
    startAuthServerGateway(passwordSetup({ access_token: { audience: ['orders-api'], ttl: '15m' } })),
    startAuthServerGateway(passwordSetup({ access_token: { format: 'opaque', audience: ['orders-api'] } })),
  ])
})
afterAll(() => Promise.all([gateway.close(), opaque.close()]))

const asRs = { authorization: basic(RS.client_id, RS.client_secret) }

async function clientCredentials(target: RunningGateway, scope?: string) {
  const res = await postForm(target, '/token', { grant_type: 'client_credentials', ...(scope !== undefined && { scope }) }, asRs)
  expect(res.status).toBe(200)
  return res.body as { access_token: string; expires_in: number; scope: string }
}

describe('JWT access tokens (RFC 9068)', () => {
  it('AT-01 carry typ at+jwt, the configured asymmetric alg and a kid the JWKS resolves (JW-04)', async () => {
    const { access_token } = await clientCredentials(gateway)
    const header = decodeProtectedHeader(access_token)
    expect(header).toMatchObject({ typ: 'at+jwt', alg: 'ES256' })
    const jwks = await (await fetch(`${gateway.url}/jwks`)).json() as { keys: Array<{ kid: string; alg: string }> }
    expect(jwks.keys.filter((key) => key.kid === header.kid && key.alg === 'ES256')).toHaveLength(1)
  })

  it('AT-02 carry iss exp aud sub client_id iat jti and scope, with exp - iat = expires_in and a unique jti', async () => {
    const first = await clientCredentials(gateway, 'orders:read')
    const second = await clientCredentials(gateway, 'orders:read')
    const claims = decodeJwt(first.access_token)
    for (const name of ['iss', 'exp', 'aud', 'sub', 'client_id', 'iat', 'jti']) expect(claims[name], name).toBeDefined()
    expect(claims.exp! - claims.iat!).toBe(first.expires_in)
    expect(first.expires_in).toBe(15 * 60)
    expect(claims.scope).toBe('orders:read')
    expect(claims.jti).not.toBe(decodeJwt(second.access_token).jti)
  })

  it('AT-03 carry the configured audience, never empty', async () => {
    const { access_token } = await clientCredentials(gateway)
    expect(decodeJwt(access_token).aud).toBe('orders-api')
  })

  it('AT-03 carry the RFC 8707 resource requested, and refuse an unknown one with invalid_target', async ({ onTestFinished }) => {
    const multi = await startAuthServerGateway(passwordSetup({ access_token: { audience: ['orders-api', 'billing-api'] } }))
    onTestFinished(() => multi.close())
    const one = await postForm(multi, '/token', { grant_type: 'client_credentials', resource: 'billing-api' }, asRs)
    expect(one.status).toBe(200)
    expect(decodeJwt(one.body.access_token as string).aud).toBe('billing-api')
    const both = await postForm(multi, '/token', { grant_type: 'client_credentials' }, asRs)
    expect(decodeJwt(both.body.access_token as string).aud).toEqual(['orders-api', 'billing-api'])
    const unknown = await postForm(multi, '/token', { grant_type: 'client_credentials', resource: 'https://evil.example/' }, asRs)
    expect([unknown.status, unknown.body.error]).toEqual([400, 'invalid_target'])
  })

  it('AT-04 name the user as sub for a user grant and the client for client_credentials (CC-04)', async () => {
    const user = (await passwordGrant(gateway)).body.access_token as string
    expect(decodeJwt(user)).toMatchObject({ sub: 'alice', client_id: APP.client_id })
    const service = (await clientCredentials(gateway)).access_token
    expect(decodeJwt(service)).toMatchObject({ sub: RS.client_id, client_id: RS.client_id })
  })

  it('AT-05 pass oauth4webapi validateJwtAccessToken, a strict resource-server check', async () => {
    const issuer = new URL(gateway.issuer)
    const as = await oauth.processDiscoveryResponse(issuer,
      await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', [oauth.allowInsecureRequests]: true }))
    const { access_token } = await clientCredentials(gateway, 'orders:read')
    const request = new Request(`${gateway.url}/api/orders`, { headers: { authorization: `Bearer ${access_token}` } })
    const claims = await oauth.validateJwtAccessToken(as, request, 'orders-api', { [oauth.allowInsecureRequests]: true })
    expect(claims).toMatchObject({ iss: gateway.issuer, client_id: RS.client_id, scope: 'orders:read' })
  })

  it('G-01 names the issuer byte-identically in both metadata documents, the token and introspection', async () => {
    const rfc8414 = await (await fetch(`${gateway.url}/.well-known/oauth-authorization-server`)).json() as { issuer: string }
    const oidc = await (await fetch(`${gateway.url}/.well-known/openid-configuration`)).json() as { issuer: string }
    const { access_token } = await clientCredentials(gateway)
    const introspection = (await postForm(gateway, '/introspect', { token: access_token }, asRs)).body
    for (const issuer of [rfc8414.issuer, oidc.issuer, decodeJwt(access_token).iss, introspection.iss]) expect(issuer).toBe(gateway.issuer)
  })
})

describe('opaque access tokens', () => {
  it('AT-07 are 256-bit random pat_ values that introspect to the same claims a JWT would carry', async () => {
    const { access_token, expires_in } = await clientCredentials(opaque, 'orders:read')
    expect(access_token).toMatch(/^pat_[A-Za-z0-9_-]{43}$/)
    const res = await postForm(opaque, '/introspect', { token: access_token }, asRs)
    expect(res.body).toMatchObject({ active: true, client_id: RS.client_id, sub: RS.client_id, scope: 'orders:read', aud: 'orders-api', iss: opaque.issuer })
    expect((res.body.exp as number) - (res.body.iat as number)).toBe(expires_in)
    expect(typeof res.body.jti).toBe('string')
    expect((await callApi(opaque, access_token)).status).toBe(200)
  })
})

describe('G-09 entropy of what the server generates', () => {
  it('draws 10 000 unique values of at least 128 bits from the CSPRNG', () => {
    const values = new Set(Array.from({ length: 10_000 }, () => randomToken('prt_')))
    expect(values.size).toBe(10_000)
    for (const value of [...values].slice(0, 100)) {
      const body = value.slice(4)
      expect(body).toMatch(/^[A-Za-z0-9_-]+$/)
      expect(body.length * Math.log2(64)).toBeGreaterThanOrEqual(128)
    }
  })
})

describe('RFC request examples', () => {
  it('TV-8 RFC 7009 §2.1: token and token_type_hint=refresh_token with a Basic header revokes the refresh token', async () => {
    const { refresh_token } = (await passwordGrant(gateway)).body as { refresh_token: string }
    const res = await postForm(gateway, '/revoke', { token: refresh_token, token_type_hint: 'refresh_token' },
      { authorization: basic(APP.client_id, APP.client_secret) })
    expect(res.status).toBe(200)
    const after = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token, ...APP })
    expect(after.body.error).toBe('invalid_grant')
  })

  it('TV-9 RFC 7662 §2.1: token and token_type_hint=access_token with Accept: application/json introspects (IN-07 for a JWT)', async () => {
    const { access_token } = await clientCredentials(gateway)
    const res = await postForm(gateway, '/introspect', { token: access_token, token_type_hint: 'access_token' },
      { ...asRs, accept: 'application/json' })
    expect(res.status).toBe(200)
    expect(res.body.active).toBe(true)
  })
})
