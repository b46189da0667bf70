/**
 * Issuer presets (issue 17) against tokens shaped as Entra ID, Keycloak, Auth0, Okta and Amazon Cognito issue
 * them (test/support/provider-tokens.ts): one gateway per provider, whose issuers name the provider's real
 * `iss` and take their keys from the test issuer's JWKS. Each checks that permissions are read where that
 * provider puts them, the client id header, claim conditions and headers, and that the provider's look-alike
 * tokens (ID tokens, other audiences, the Okta org server) are refused. Every refusal asserts the answer,
 * the "request denied" log reason and that nothing reached the upstream.
 */
import type { JWTPayload } from 'jose'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { startGateway, type RunningGateway } from '../support/gateway.js'
import { signWith, startTestIssuer, type TestIssuer } from '../support/issuer.js'
import {
  AUTH0_RFC9068_TYP, AUTH0_TYP, COGNITO_TYP, ENTRA_TYP, KEYCLOAK_TYP, OKTA_ORG_AS_TYP, OKTA_TYP, auth0Issuer, auth0M2mToken,
  auth0UserToken, cognitoClientToken, cognitoIdToken, cognitoIssuer, cognitoUserToken, entraAppToken, entraIssuerV1,
  entraIssuerV2, entraUserToken, entraV1Token, keycloakIssuer, keycloakServiceAccountToken, keycloakUserToken, oktaClientToken,
  oktaIssuer, oktaUserToken,
} from '../support/provider-tokens.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

let idp: TestIssuer
let upstream: RecordingUpstream
const gateways: RunningGateway[] = []
beforeAll(async () => { [idp, upstream] = await Promise.all([startTestIssuer(), startRecordingUpstream()]) })
afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()))
  await Promise.all([idp.close(), upstream.close()])
})
beforeEach(() => {
  upstream.requests.length = 0
  for (const gateway of gateways) gateway.logs.length = 0
})

type Entry = Record<string, unknown>
/** A gateway for the describe block it is called in: every issuer on the test JWKS, every route to `main`. */
function gatewayFor(issuers: Entry[], routes: Entry[]): () => RunningGateway {
  let gateway: RunningGateway
  beforeAll(async () => {
    gateway = await startGateway({
      server: { realm: 'test' },
      upstreams: { main: { url: upstream.url, timeout: '2s' } },
      issuers: issuers.map((issuer) => ({ jwks_uri: idp.jwksUri, ...issuer })),
      routes: routes.map((route) => ({ upstream: 'main', ...route })),
      log: { level: 'info' },
    })
    gateways.push(gateway)
  })
  return () => gateway
}

/** Signed with the test issuer's RS256 key; `typ` undefined: no typ header at all (Okta, Cognito). */
function sign(payload: JWTPayload, typ: string | undefined): Promise<string> {
  const key = idp.keys.find((k) => k.alg === 'RS256')!
  return signWith(key, payload, typ === undefined ? { header: { typ: undefined } } : { typ })
}

function get(gateway: RunningGateway, path: string, token: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${gateway.url}${path}`, { headers: { ...headers, authorization: `Bearer ${token}` } })
}

/** The one forwarded request's headers. */
function forwarded(res: Response): Record<string, unknown> {
  expect(res.status).toBe(200)
  expect(upstream.requests).toHaveLength(1)
  return upstream.requests.splice(0)[0]!.headers
}

/** A refusal: its status, error and challenge, the one "request denied" reason, and nothing forwarded. */
async function refused(gateway: RunningGateway, res: Response, status: 401 | 403, reason: string, scope?: string): Promise<void> {
  const body = await res.json() as { error: string }
  expect(res.status).toBe(status)
  const challenge = res.headers.get('www-authenticate')
  if (status === 401) {
    expect(body.error).toBe('invalid_token')
    expect(challenge).toContain('error="invalid_token"')
  } else if (scope !== undefined) {
    expect(body.error).toBe('insufficient_scope')
    expect(challenge).toContain(`error="insufficient_scope", error_description="the access token lacks a required scope", scope="${scope}"`)
  } else {
    expect(body.error).toBe('access_denied')
    expect(challenge).toBeNull()
  }
  expect(upstream.requests).toHaveLength(0)
  const reasons = gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
  expect(reasons).toEqual([reason])
  gateway.logs.length = 0
}

describe('Entra ID', () => {
  const [TENANT, API] = ['72f988bf-86f1-41af-91ab-2d7cd011db47', '6e74172b-be56-4843-9ff4-e66a39bb12e3']
  const CLIENT = 'b2d4f6a8-1c3e-4a5b-9d7f-0e2c4a6b8d0f'
  const [V2, V1] = [entraIssuerV2(TENANT), entraIssuerV1(TENANT)]
  const gw = gatewayFor([
    { issuer: V2, audience: [API], preset: 'entra' },
    // API manifest at accessTokenAcceptedVersion null/1: v1 tokens, whose aud may be the App ID URI.
    { issuer: V1, audience: [API, 'api://orders-api'], preset: 'entra' },
  ], [
    { id: 'orders', path: '/orders/**', scopes: { any: ['Orders.Read', 'Orders.Read.All'] } },
    { id: 'tenant', path: '/tenant/**', claims: { all: [{ claim: 'tid', equals: TENANT }] }, claim_headers: { 'X-Tenant-Id': 'tid' } },
  ])
  const common = { issuer: V2, audience: API, tenantId: TENANT, clientId: CLIENT }

  it('a v2 delegated token (scp string) is forwarded with azp as the client id', async () => {
    const headers = forwarded(await get(gw(), '/orders/1', await sign(entraUserToken({ ...common, scp: 'Orders.Read User.Read' }), ENTRA_TYP)))
    expect(headers['x-auth-scopes']).toBe('Orders.Read User.Read')
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-subject']).toBe('AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ')
    expect(headers['x-auth-issuer']).toBe(V2)
  })

  it('an app-only token (roles array, no scp, no idtyp) is forwarded on its role', async () => {
    const payload = entraAppToken({ ...common, roles: ['Orders.Read.All'], idtyp: false })
    expect(payload.scp).toBeUndefined()
    const headers = forwarded(await get(gw(), '/orders/1', await sign(payload, ENTRA_TYP)))
    expect(headers['x-auth-scopes']).toBe('Orders.Read.All')
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-subject']).toBe(payload.sub)
  })

  it('a v1 token (appid, App ID URI audience) gives the client id from appid', async () => {
    const payload = entraV1Token({ issuer: V1, audience: 'api://orders-api', tenantId: TENANT, clientId: CLIENT, scp: 'Orders.Read' })
    const headers = forwarded(await get(gw(), '/orders/1', await sign(payload, ENTRA_TYP)))
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-issuer']).toBe(V1)
    expect(headers['x-auth-scopes']).toBe('Orders.Read')
  })

  it('refuses an ID token whose aud is the API (an app that also signs users in): it names no client (azp/appid)', async () => {
    const { azp: _azp, scp: _scp, ...idToken } = entraUserToken({ ...common, roles: ['Orders.Read'] })
    await refused(gw(), await get(gw(), '/orders/1', await sign({ ...idToken, nonce: 'n-0S6_WzA2Mj' }, ENTRA_TYP)), 401,
      'unmet_issuer_condition preset.claims.any: none held')
  })

  it('an app-only token without the role is 403 insufficient_scope naming the route scopes', async () => {
    const token = await sign(entraAppToken({ ...common, roles: ['Orders.Write.All'] }), ENTRA_TYP)
    await refused(gw(), await get(gw(), '/orders/1', token), 403, 'none of Orders.Read Orders.Read.All', 'Orders.Read Orders.Read.All')
  })

  it('a tid condition admits the tenant with X-Tenant-Id (a spoofed one dropped) and refuses another tenant', async () => {
    const mine = await sign(entraUserToken(common), ENTRA_TYP)
    const headers = forwarded(await get(gw(), '/tenant/x', mine, { 'x-tenant-id': 'evil' }))
    expect(headers['x-tenant-id']).toBe(TENANT)
    const other = await sign(entraUserToken({ ...common, tenantId: '9188040d-6c67-4c5b-b112-36a304b66dad' }), ENTRA_TYP)
    await refused(gw(), await get(gw(), '/tenant/x', other), 403, `claims.all[0]: tid equals "${TENANT}"`)
  })
})

describe('Keycloak', () => {
  const [ACME, SHOP] = [keycloakIssuer('https://sso.example.com', 'acme'), keycloakIssuer('https://sso.example.com', 'shop')]
  const gw = gatewayFor([
    { issuer: ACME, audience: ['orders-api'], preset: 'keycloak' },
    { issuer: SHOP, audience: ['orders-api'], preset: 'keycloak', scope_claim: ['scope', 'realm_access.roles', 'resource_access.orders-api.roles'] },
  ], [
    { id: 'reports', path: '/reports/**', scopes: { all: ['orders-reader'] }, claim_headers: { 'X-Roles': 'realm_access.roles' } },
    { id: 'admin', path: '/admin/**', scopes: { all: ['orders-admin'] } },
  ])

  it('grants realm roles from realm_access.roles, with X-Roles and azp as the client id', async () => {
    const token = await sign(keycloakUserToken({ issuer: ACME, clientId: 'orders-web', audience: 'orders-api' }), KEYCLOAK_TYP)
    const headers = forwarded(await get(gw(), '/reports/q3', token, { 'x-roles': 'orders-admin' }))
    expect(headers['x-roles']).toBe('default-roles-acme, offline_access, uma_authorization, orders-reader')
    expect(headers['x-auth-scopes']).toBe('openid profile email default-roles-acme offline_access uma_authorization orders-reader')
    expect(headers['x-auth-client-id']).toBe('orders-web')
  })

  it('grants a client role only where scope_claim names resource_access.<client>.roles', async () => {
    const shape = { clientId: 'orders-batch', audience: 'orders-api', clientRoles: { 'orders-api': ['orders-admin'] } }
    const headers = forwarded(await get(gw(), '/admin/x', await sign(keycloakServiceAccountToken({ ...shape, issuer: SHOP }), KEYCLOAK_TYP)))
    expect(headers['x-auth-client-id']).toBe('orders-batch')
    expect(headers['x-auth-subject']).toBe('7a8b9c0d-1e2f-4a3b-9c4d-5e6f7a8b9c0d')
    const presetOnly = await sign(keycloakServiceAccountToken({ ...shape, issuer: ACME }), KEYCLOAK_TYP)
    await refused(gw(), await get(gw(), '/admin/x', presetOnly), 403, 'missing orders-admin', 'orders-admin')
  })

  it('refuses an ID token (payload typ "ID") with a valid aud, also where scope_claim is explicit', async () => {
    for (const issuer of [ACME, SHOP]) {
      const token = await sign({ ...keycloakUserToken({ issuer, clientId: 'orders-api', audience: 'orders-api' }), typ: 'ID' }, KEYCLOAK_TYP)
      await refused(gw(), await get(gw(), '/reports/q3', token), 401, 'unmet_issuer_condition preset.claims.all[0]: typ equals "Bearer"')
    }
  })

  it('refuses a token with no aud (no audience mapper) and one with the stock "account" audience', async () => {
    const none = await sign(keycloakUserToken({ issuer: ACME, clientId: 'orders-web' }), KEYCLOAK_TYP)
    await refused(gw(), await get(gw(), '/reports/q3', none), 401, 'missing_claim')
    const account = await sign(keycloakUserToken({ issuer: ACME, clientId: 'orders-web', audience: 'account' }), KEYCLOAK_TYP)
    await refused(gw(), await get(gw(), '/reports/q3', account), 401, 'wrong_audience')
  })
})

describe('Auth0', () => {
  const [ISS, API] = [auth0Issuer('acme.us.auth0.com'), 'https://api.example.com/orders']
  const CLIENT = 'Xq3mZ8vL2pR7tN4kW9sB1cD6fH0jG5aE'
  const ROLES = '["https://example.com/roles"]'
  const gw = gatewayFor([{ issuer: ISS, audience: [API], preset: 'auth0' }], [
    { id: 'orders', path: '/orders/**', scopes: { all: ['read:orders'] } },
    { id: 'manage', path: '/manage/**', scopes: { all: ['read:orders'] }, claims: { all: [{ claim: ROLES, contains: 'admin' }] } },
  ])
  const common = { issuer: ISS, audience: API, clientId: CLIENT }

  it('grants from the permissions array alone, with aud [API, userinfo] and azp as the client id', async () => {
    const payload = { ...auth0UserToken({ ...common, permissions: ['read:orders'] }), scope: 'openid profile email' }
    expect(payload.aud).toEqual([API, 'https://acme.us.auth0.com/userinfo'])
    const headers = forwarded(await get(gw(), '/orders/1', await sign(payload, AUTH0_TYP)))
    expect(headers['x-auth-scopes']).toBe('openid profile email read:orders')
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-subject']).toBe('auth0|64f1c2a9e3b7d5a1c9e2f4b6')
  })

  it('forwards an M2M token (gty client-credentials, sub <client>@clients) with azp as the client id', async () => {
    const headers = forwarded(await get(gw(), '/orders/1', await sign(auth0M2mToken(common), AUTH0_TYP)))
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-subject']).toBe(`${CLIENT}@clients`)
  })

  it('accepts the RFC 9068 profile (at+jwt, client_id, no azp) with client_id as the client id', async () => {
    for (const payload of [auth0M2mToken({ ...common, profile: 'rfc9068' }), auth0UserToken({ ...common, profile: 'rfc9068' })]) {
      expect(payload.azp).toBeUndefined()
      const headers = forwarded(await get(gw(), '/orders/1', await sign(payload, AUTH0_RFC9068_TYP)))
      expect(headers['x-auth-client-id']).toBe(CLIENT)
    }
  })

  it('a condition on the namespaced roles claim: admin forwarded, order-manager 403 access_denied', async () => {
    const admin = await sign({ ...auth0UserToken(common), 'https://example.com/roles': ['admin'] }, AUTH0_TYP)
    forwarded(await get(gw(), '/manage/1', admin))
    const manager = await sign(auth0UserToken(common), AUTH0_TYP)
    await refused(gw(), await get(gw(), '/manage/1', manager), 403, `claims.all[0]: ${ROLES} contains "admin"`)
  })

  it('refuses an aud array without the API (userinfo only)', async () => {
    const token = await sign({ ...auth0UserToken(common), aud: ['https://acme.us.auth0.com/userinfo'] }, AUTH0_TYP)
    await refused(gw(), await get(gw(), '/orders/1', token), 401, 'wrong_audience')
  })
})

describe('Okta', () => {
  const [ORG, ISS, CLIENT] = ['https://dev-123456.okta.com', oktaIssuer('dev-123456.okta.com'), '0oa8f2kq1xYzAbCdE5d7']
  const gw = gatewayFor([{ issuer: ISS, audience: ['api://default'], preset: 'okta' }], [
    { id: 'orders', path: '/orders/**', scopes: { all: ['orders:read'] } },
  ])
  const common = { issuer: ISS, audience: 'api://default', clientId: CLIENT }

  it('grants from the scp array with no typ header; cid is the client id, sub the login', async () => {
    const headers = forwarded(await get(gw(), '/orders/1', await sign(oktaUserToken(common), OKTA_TYP)))
    expect(headers['x-auth-scopes']).toBe('openid profile orders:read')
    expect(headers['x-auth-client-id']).toBe(CLIENT)
    expect(headers['x-auth-subject']).toBe('alice@example.com')
    expect(forwarded(await get(gw(), '/orders/1', await sign(oktaClientToken(common), OKTA_TYP)))['x-auth-client-id']).toBe(CLIENT)
  })

  it('refuses a token without the scope', async () => {
    const token = await sign(oktaUserToken({ ...common, scopes: ['openid', 'profile'] }), OKTA_TYP)
    await refused(gw(), await get(gw(), '/orders/1', token), 403, 'missing orders:read', 'orders:read')
  })

  it('refuses an org authorization server token (bare org issuer, okta-internal typ)', async () => {
    const token = await sign(oktaUserToken({ issuer: ORG, audience: ORG, clientId: CLIENT }), OKTA_ORG_AS_TYP)
    await refused(gw(), await get(gw(), '/orders/1', token), 401, 'unknown_issuer')
  })

  it('accepts RS256 only (the preset algorithms): the same token signed ES256 is refused', async () => {
    const token = await signWith(idp.keys.find((k) => k.alg === 'ES256')!, oktaUserToken(common), { header: { typ: undefined } })
    await refused(gw(), await get(gw(), '/orders/1', token), 401, 'algorithm_not_allowed')
  })
})

describe('Amazon Cognito', () => {
  const ISS = cognitoIssuer('eu-west-1', 'eu-west-1_AbCdEfGhI')
  const [APP, M2M] = ['3n4b5urk1ft4fl3mg5e62d9ado', '7k2m9q4r1t6v8x3z5b0d2f4h6j']
  const gw = gatewayFor([{ issuer: ISS, audience: [APP, M2M], preset: 'cognito' }], [
    { id: 'group', path: '/group/**', scopes: { all: ['order-readers'] } },
    { id: 'orders', path: '/orders/**', scopes: { any: ['orders/read', 'https://api.example.com/orders.read'] } },
  ])

  it('a user access token (no aud, no typ) passes a group route and a scope route, client_id as the client id', async () => {
    const payload = cognitoUserToken({ issuer: ISS, clientId: APP })
    expect(payload.aud).toBeUndefined()
    const token = await sign(payload, COGNITO_TYP)
    const headers = forwarded(await get(gw(), '/group/1', token))
    expect(headers['x-auth-scopes']).toBe('openid email https://api.example.com/orders.read order-readers')
    expect(headers['x-auth-client-id']).toBe(APP)
    forwarded(await get(gw(), '/orders/1', token))
  })

  it('checks client_id as the audience: a token of another app client is refused', async () => {
    const token = await sign(cognitoUserToken({ issuer: ISS, clientId: 'another-app-client' }), COGNITO_TYP)
    await refused(gw(), await get(gw(), '/group/1', token), 401, 'wrong_audience')
  })

  it('refuses an ID token (aud = the client id, no client_id), and token_use "id" on any shape', async () => {
    await refused(gw(), await get(gw(), '/group/1', await sign(cognitoIdToken({ issuer: ISS, clientId: APP }), COGNITO_TYP)), 401, 'missing_claim')
    const relabelled = await sign({ ...cognitoUserToken({ issuer: ISS, clientId: APP }), token_use: 'id' }, COGNITO_TYP)
    await refused(gw(), await get(gw(), '/group/1', relabelled), 401, 'unmet_issuer_condition preset.claims.all[0]: token_use equals "access"')
  })

  it('forwards M2M tokens on either form of custom scope, sub the client id', async () => {
    for (const scope of ['orders/read orders/write', 'https://api.example.com/orders.read']) {
      const headers = forwarded(await get(gw(), '/orders/1', await sign(cognitoClientToken({ issuer: ISS, clientId: M2M, scope }), COGNITO_TYP)))
      expect(headers['x-auth-client-id']).toBe(M2M)
      expect(headers['x-auth-subject']).toBe(M2M)
      expect(headers['x-auth-scopes']).toBe(scope)
    }
  })
})
