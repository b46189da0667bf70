/**
 * The main flows driven by a real strict client, oauth4webapi: discovery, client_credentials, password
 * then refresh (rotation), revocation and introspection. Anything the library finds off-spec fails here.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as oauth from 'oauth4webapi'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, APP, RS, callApi, passwordSetup } from '../support/authserver.js'

const insecure = { [oauth.allowInsecureRequests]: true } as const
let gateway: RunningGateway & { issuer: string }
let as: oauth.AuthorizationServer
beforeAll(async () => {
  gateway = await startAuthServerGateway(passwordSetup())
  const issuer = new URL(gateway.issuer)
  as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
})
afterAll(() => gateway.close())

const app: oauth.Client = { client_id: APP.client_id }
const rs: oauth.Client = { client_id: RS.client_id }

describe('oauth4webapi against the embedded server', () => {
  it('discovers the RFC 8414 metadata with the issuer it expects', () => {
    expect(as.issuer).toBe(gateway.issuer)
    expect(as.token_endpoint).toBe(`${gateway.issuer}/token`)
  })

  it('gets a password grant, refreshes it (rotation), introspects and revokes it, each step accepted by the library', async () => {
    const login = await oauth.processGenericTokenEndpointResponse(as, app, await oauth.genericTokenEndpointRequest(
      as, app, oauth.ClientSecretPost(APP.client_secret), 'password', new URLSearchParams({ ...ALICE, scope: 'orders:read' }), insecure))
    expect(login.refresh_token).toBeDefined()
    const refreshed = await oauth.processRefreshTokenResponse(as, app, await oauth.refreshTokenGrantRequest(
      as, app, oauth.ClientSecretPost(APP.client_secret), login.refresh_token!, insecure))
    expect(refreshed.refresh_token).not.toBe(login.refresh_token)
    expect(refreshed.token_type).toBe('bearer')
    expect((await callApi(gateway, refreshed.access_token)).status).toBe(200)

    const introspection = await oauth.processIntrospectionResponse(as, app, await oauth.introspectionRequest(
      as, app, oauth.ClientSecretBasic(APP.client_secret), refreshed.access_token, insecure))
    expect(introspection).toMatchObject({ active: true, sub: 'alice', client_id: APP.client_id, scope: 'orders:read' })

    await oauth.processRevocationResponse(await oauth.revocationRequest(
      as, app, oauth.ClientSecretBasic(APP.client_secret), refreshed.refresh_token!, insecure))
    const after = await oauth.processIntrospectionResponse(as, app, await oauth.introspectionRequest(
      as, app, oauth.ClientSecretBasic(APP.client_secret), refreshed.access_token, insecure))
    expect(after.active).toBe(false)
    expect((await callApi(gateway, refreshed.access_token)).status).toBe(401)
  })

  it('issue 16: replaying the rotated-out refresh token at once is refused, and the newer refresh and access tokens are dead (RFC 9700 §4.14.2)', async () => {
    const auth = oauth.ClientSecretPost(APP.client_secret)
    const login = await oauth.processGenericTokenEndpointResponse(as, app, await oauth.genericTokenEndpointRequest(
      as, app, auth, 'password', new URLSearchParams({ ...ALICE, scope: 'orders:read' }), insecure))
    const refreshed = await oauth.processRefreshTokenResponse(as, app, await oauth.refreshTokenGrantRequest(as, app, auth, login.refresh_token!, insecure))
    // A thief who refreshed first, then the client with the token it still holds: no delay in between.
    await expect(oauth.processRefreshTokenResponse(as, app, await oauth.refreshTokenGrantRequest(as, app, auth, login.refresh_token!, insecure)))
      .rejects.toMatchObject({ error: 'invalid_grant' })
    await expect(oauth.processRefreshTokenResponse(as, app, await oauth.refreshTokenGrantRequest(as, app, auth, refreshed.refresh_token!, insecure)))
      .rejects.toMatchObject({ error: 'invalid_grant' })
    const introspection = await oauth.processIntrospectionResponse(as, app, await oauth.introspectionRequest(
      as, app, oauth.ClientSecretBasic(APP.client_secret), refreshed.access_token, insecure))
    expect(introspection.active).toBe(false)
    expect((await callApi(gateway, refreshed.access_token)).status).toBe(401)
  })

  it('gets client_credentials tokens with basic and post authentication', async () => {
    for (const auth of [oauth.ClientSecretBasic(RS.client_secret), oauth.ClientSecretPost(RS.client_secret)]) {
      const response = await oauth.processClientCredentialsResponse(as, rs, await oauth.clientCredentialsGrantRequest(
        as, rs, auth, new URLSearchParams({ scope: 'orders:read' }), insecure))
      expect(response.scope).toBe('orders:read')
      expect(response.refresh_token).toBeUndefined()
    }
  })

  it('surfaces a refused refresh as the RFC error the library parses', async () => {
    await expect(oauth.processRefreshTokenResponse(as, app, await oauth.refreshTokenGrantRequest(
      as, app, oauth.ClientSecretPost(APP.client_secret), 'prt_' + 'A'.repeat(43), insecure)))
      .rejects.toMatchObject({ error: 'invalid_grant' })
  })
})
