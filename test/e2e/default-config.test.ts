/**
 * The README's sessions against config/portcullis.yaml itself (on a free port, with a memory store): the
 * demo clients and user the default config ships must do what the README shows.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { startGateway, type RunningGateway } from '../support/gateway.js'
import { closedPort } from '../support/upstream.js'
import { basic, postForm } from '../support/authserver.js'
import { FormBrowser, field, loginAndConsent, responseParams } from '../support/browser.js'
import { s256 } from '../../src/authserver/pkce.js'

/** RFC 9728 §2 with RFC 9449: the default `dpop.algorithms` (issue 20). */
const DPOP_ALGS = ['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519']

const run = promisify(execFile)
const DEMO = { username: 'demo', password: 'demo-password-change-me' }
const CALLBACK = 'http://127.0.0.1:3000/callback'

async function echo(gateway: RunningGateway, token: string): Promise<{ status: number; headers: Record<string, string> }> {
  const res = await fetch(`${gateway.url}/api/orders/42`, { headers: { authorization: `Bearer ${token}` } })
  const body = await res.json() as { headers?: Record<string, string> }
  return { status: res.status, headers: body.headers ?? {} }
}

describe('the default config and the README sessions', () => {
  let gateway: RunningGateway
  beforeAll(async () => {
    const port = await closedPort()
    const text = readFileSync('config/portcullis.yaml', 'utf8').replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)
    const config = parse(text) as { issuers: Array<Record<string, unknown>>; authorization_server: Record<string, unknown> }
    config.issuers[0]!.jwks_file = path.resolve('config/dev/jwks.json')
    config.authorization_server.store = { type: 'memory' }
    gateway = await startGateway(config, { port })
  })
  afterAll(() => gateway.close())

  it('examples/dpop-client.mjs (README, DPoP): a bound token for demo-service, the echo API with proofs, refused as Bearer', async () => {
    const { stdout } = await run(process.execPath, ['examples/dpop-client.mjs', gateway.url])
    expect(stdout.split('\n')).toEqual([
      'token_type: dpop',
      'GET /api/orders/42 with DPoP: 200, x-auth-subject: demo-service',
      expect.stringMatching(/^the same token as Bearer: 401, DPoP realm="portcullis", error="invalid_token", error_description="[^"]+", scope="echo:read", resource_metadata="[^"]+", algs="ES256 ES384 PS256 RS256 EdDSA Ed25519"$/),
      '',
    ])
  })

  it('the decision endpoint (README, decision mode): 200 with the identity, 401 with the proxy mode\'s challenge', async () => {
    const tokens = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'echo:read' },
      { authorization: basic('demo-service', 'demo-secret-change-me') })
    const describe = { 'x-original-method': 'GET', 'x-original-uri': '/api/orders/42' }
    const allowed = await fetch(`${gateway.decisionUrl!}/decide`, { headers: { ...describe, authorization: `Bearer ${tokens.body.access_token as string}` } })
    expect([allowed.status, allowed.headers.get('x-auth-subject')]).toEqual([200, 'demo-service'])
    const refused = await fetch(`${gateway.decisionUrl!}/decide`, { headers: describe })
    expect(refused.status).toBe(401)
    expect(refused.headers.get('www-authenticate'))
      .toBe(`Bearer realm="portcullis", scope="echo:read", resource_metadata="${gateway.url}/.well-known/oauth-protected-resource"`)
  })

  it('demo-service: client_credentials, then the echo API sees it as the subject', async () => {
    const tokens = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'echo:read' },
      { authorization: basic('demo-service', 'demo-secret-change-me') })
    expect(tokens.status).toBe(200)
    const res = await echo(gateway, tokens.body.access_token as string)
    expect(res.status).toBe(200)
    expect(res.headers['x-auth-subject']).toBe('demo-service')
  })

  it('the echo API is a protected resource: its metadata, resource_metadata in the 401, a token bound to it', async () => {
    const metadata = await fetch(`${gateway.url}/.well-known/oauth-protected-resource`)
    expect(await metadata.json()).toEqual({
      resource: gateway.url, authorization_servers: [gateway.url], scopes_supported: ['echo:read', 'echo:write'],
      bearer_methods_supported: ['header'], dpop_signing_alg_values_supported: DPOP_ALGS, resource_name: 'Portcullis echo API',
    })
    const anonymous = await fetch(`${gateway.url}/api/orders/42`)
    expect(anonymous.headers.get('www-authenticate'))
      .toBe(`Bearer realm="portcullis", scope="echo:read", resource_metadata="${gateway.url}/.well-known/oauth-protected-resource"`)
    const tokens = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'echo:read', resource: gateway.url },
      { authorization: basic('demo-service', 'demo-secret-change-me') })
    expect(tokens.status).toBe(200)
    const claims = JSON.parse(Buffer.from((tokens.body.access_token as string).split('.')[1]!, 'base64url').toString()) as { aud: unknown }
    expect(claims.aud).toBe(gateway.url)
    expect((await echo(gateway, tokens.body.access_token as string)).status).toBe(200)
  })

  it("the demo SPA's origin may call the API: its preflight is answered by the gateway, its 401 is readable", async () => {
    const preflight = await fetch(`${gateway.url}/api/orders/42`, { method: 'OPTIONS', headers: {
      origin: 'http://127.0.0.1:3000', 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization',
    } })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://127.0.0.1:3000')
    expect(preflight.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization')
    const anonymous = await fetch(`${gateway.url}/api/orders/42`, { headers: { origin: 'http://127.0.0.1:3000' } })
    expect(anonymous.status).toBe(401)
    expect(anonymous.headers.get('access-control-allow-origin')).toBe('http://127.0.0.1:3000')
    expect(anonymous.headers.get('access-control-expose-headers')).toContain('WWW-Authenticate')
    const elsewhere = await fetch(`${gateway.url}/api/orders/42`, { method: 'OPTIONS', headers: {
      origin: 'http://127.0.0.1:4000', 'access-control-request-method': 'GET' } })
    expect(elsewhere.status).toBe(403)
    expect(elsewhere.headers.get('access-control-allow-origin')).toBeNull()
  })

  it('demo-spa: authorization code + PKCE for the user demo, on a loopback callback of any port', async () => {
    const verifier = 'readme-verifier-0123456789-abcdefghijklmnopqrstuv'
    const query = new URLSearchParams({
      response_type: 'code', client_id: 'demo-spa', redirect_uri: CALLBACK, scope: 'openid echo:read', state: 'xyz', nonce: 'n1',
      code_challenge: s256(verifier), code_challenge_method: 'S256',
    })
    const browser = new FormBrowser(gateway.url)
    const done = await loginAndConsent(browser, await browser.get(`/authorize?${query}`), DEMO)
    expect(done.location!.startsWith(`${CALLBACK}?code=`)).toBe(true)
    const tokens = await postForm(gateway, '/token', {
      grant_type: 'authorization_code', client_id: 'demo-spa', code: responseParams(done.location).get('code')!,
      redirect_uri: CALLBACK, code_verifier: verifier,
    })
    expect(tokens.status).toBe(200)
    expect(tokens.body).toMatchObject({ scope: 'openid echo:read', token_type: 'Bearer' })
    expect(typeof tokens.body.id_token).toBe('string')
    expect(tokens.body.refresh_token).toMatch(/^prt_/)
    const res = await echo(gateway, tokens.body.access_token as string)
    expect(res.status).toBe(200)
    expect(res.headers['x-auth-subject']).toBe('demo')
    expect(res.headers['x-auth-client-id']).toBe('demo-spa')
  })

  it('demo-device: device authorization approved on /device by demo; the next poll gets the tokens', async () => {
    const started = await postForm(gateway, '/device_authorization', { client_id: 'demo-device', scope: 'openid echo:read' })
    expect(started.status).toBe(200)
    expect(started.body.verification_uri).toBe(`${gateway.url}/device`)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get('/device')
    const back = await loginAndConsent(browser, login, DEMO)
    const entry = await browser.get(back.location!)
    const userCode = (started.body.user_code as string).toLowerCase().replace('-', '')
    const confirm = await browser.post('/device', { _csrf: field(entry, '_csrf'), user_code: userCode })
    expect(confirm.text).toContain('Demo TV app')
    const approved = await browser.post('/device', {
      _csrf: field(confirm, '_csrf'), user_code: field(confirm, 'user_code'), decision: 'approve',
    })
    expect(approved.status).toBe(200)
    const tokens = await postForm(gateway, '/token', {
      grant_type: 'urn:ietf:params:oauth:grant-type:device_code', client_id: 'demo-device', device_code: started.body.device_code as string,
    })
    expect(tokens.status).toBe(200)
    expect((await echo(gateway, tokens.body.access_token as string)).headers['x-auth-subject']).toBe('demo')
  })
})

