/**
 * What a federated sign-in leaves behind and how it ends: RP-initiated logout (here, and at the provider with
 * `logout.upstream`), `refresh_check` against the provider, and the device flow signed in upstream.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { exportJWK, exportPKCS8, generateKeyPair } from 'jose'
import { FormBrowser, field, type PageResponse } from '../../support/browser.js'
import { authorizeUrl, federatedSignIn, jwtPayload, redeem, startFederated, throughUpstream, type FederatedSetup } from '../../support/federation.js'
import { postForm } from '../../support/authserver.js'

const ACCOUNTS = { alice: { email: 'alice@example.com', email_verified: true, name: 'Alice', groups: ['staff'] } }
const SIGNED_OUT = 'https://app.example.com/signed-out'
const KEK = Buffer.alloc(32, 7).toString('base64')

let setup: FederatedSetup | undefined
afterEach(async () => { await setup?.close(); setup = undefined })

function audits(event: string): Record<string, unknown>[] {
  return setup!.gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === event)
}

/** Posts the first form of a page with all its hidden fields, plus `extra`. */
async function submitForm(browser: FormBrowser, page: PageResponse, at: string, extra: Record<string, string>): Promise<PageResponse> {
  const action = new URL(/<form[^>]*action="([^"]+)"/.exec(page.text)![1]!.replace(/&amp;/g, '&'), at).href
  const hidden = Object.fromEntries([...page.text.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]))
  return browser.post(action, { ...hidden, ...extra })
}

describe('logout (OpenID Connect RP-Initiated Logout 1.0)', () => {
  it('with an id_token_hint of the signed-in user: ended at once, back to the registered URI with state; the next /authorize goes to the provider again', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    const tokens = await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const metadata = await (await fetch(`${gateway.url}/.well-known/openid-configuration`)).json() as Record<string, unknown>
    expect(metadata.end_session_endpoint).toBe(`${gateway.issuer}/logout`)
    const res = await browser.get(`/logout?${new URLSearchParams({ id_token_hint: String(tokens.id_token), post_logout_redirect_uri: SIGNED_OUT, state: 'bye' })}`)
    expect(res.status).toBe(302)
    expect(res.location).toBe(`${SIGNED_OUT}?state=bye`)
    expect(browser.cookies.has('portcullis_session')).toBe(false)
    expect(audits('logout')).toMatchObject([{ sub: 'corp:alice', client_id: 'spa', provider: 'corp' }])
    const again = await browser.get(authorizeUrl())
    expect(again.location).toContain('/login?')
  })

  it('without a hint: the user is asked first (a CSRF-protected form), and a forged POST without the token ends nothing', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const page = await browser.get('/logout')
    expect(page.status).toBe(200)
    expect(page.text).toContain('Sign out of')
    const forged = await browser.post('/logout', { confirm: 'yes' })
    expect(forged.status).toBe(403)
    expect((await browser.get(authorizeUrl())).location).toContain('/consent?')
    const done = await submitForm(browser, page, `${gateway.url}/logout`, {})
    expect(done.status).toBe(200)
    expect(done.text).toContain('You are signed out')
    expect((await browser.get(authorizeUrl())).location).toContain('/login?')
  })

  it('an unregistered post_logout_redirect_uri, or a hint we did not sign: an error page, no redirect, still signed in', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    const tokens = await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const open = await browser.get(`/logout?${new URLSearchParams({ id_token_hint: String(tokens.id_token), post_logout_redirect_uri: 'https://evil.example/' })}`)
    expect(open.status).toBe(400)
    expect(open.location).toBeUndefined()
    const [header, payload] = String(tokens.id_token).split('.')
    const forged = await browser.get(`/logout?${new URLSearchParams({ id_token_hint: `${header}.${payload}.${'A'.repeat(86)}` })}`)
    expect(forged.status).toBe(400)
    expect((await browser.get(authorizeUrl())).location).toContain('/consent?')
  })

  it('logout.upstream: the provider\'s session ends too, and the browser comes back through /logout/callback to the client', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS }, config: { logout: { upstream: true } } }])
    const { gateway, upstreams: [upstream] } = setup
    const browser = new FormBrowser(gateway.url)
    const tokens = await redeem(gateway, (await federatedSignIn(browser, upstream!, 'alice')).location)
    const res = await browser.get(`/logout?${new URLSearchParams({ id_token_hint: String(tokens.id_token), post_logout_redirect_uri: SIGNED_OUT, state: 'bye' })}`)
    const atProvider = new URL(res.location!)
    expect(atProvider.origin).toBe(new URL(upstream!.issuer).origin)
    expect(atProvider.searchParams.get('post_logout_redirect_uri')).toBe(`${gateway.issuer}/logout/callback`)
    // The provider's own ID token, not ours.
    expect(jwtPayload(atProvider.searchParams.get('id_token_hint')).iss).toBe(upstream!.issuer)
    const confirm = await browser.get(atProvider.href)
    let back = await submitForm(browser, confirm, atProvider.href, { logout: 'yes' })
    while (back.location && !back.location.startsWith(gateway.url) && !back.location.startsWith(SIGNED_OUT)) back = await browser.get(back.location)
    expect(back.location).toContain('/logout/callback?state=')
    const final = await browser.get(back.location!)
    expect(final.location).toBe(`${SIGNED_OUT}?state=bye`)
    // Signed out at the provider as well: the next sign-in shows its login page again.
    const visited: string[] = []
    let start = await browser.get(authorizeUrl())
    start = await browser.get(start.location!)
    const login = await browser.get(start.location!)
    visited.push(start.location!)
    let page = login
    while (page.location) page = await browser.get(page.location)
    expect(page.text).toContain('name="login"')
  })
})

describe('refresh_check', () => {
  it('asks the provider at each refresh: down is 503 (the refresh token still good), gone is invalid_grant and the account forgotten', async () => {
    let clock = Date.now()
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS }, config: { refresh_check: true, scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'] } }],
      { signing: { key_encryption_key: KEK } }, {}, { now: () => clock })
    const { gateway, upstreams: [upstream] } = setup
    const tokens = await redeem(gateway, (await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice')).location)
    expect(tokens.refresh_token).toBeTruthy()
    const refresh = (token: unknown) => postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: String(token), client_id: 'spa' })
    const asked = () => upstream!.requests.filter((path) => path.startsWith('/token')).length
    const before = asked()
    const first = await refresh(tokens.refresh_token)
    expect(first.status).toBe(200)
    expect(asked()).toBe(before + 1)
    upstream!.down = true
    clock += 31_000
    const down = await refresh(first.body.refresh_token)
    expect(down.status).toBe(503)
    expect(down.body.error).toBe('temporarily_unavailable')
    upstream!.down = false
    const back = await refresh(first.body.refresh_token)
    expect(back.status).toBe(200)
    upstream!.deleteAccount('alice')
    clock += 31_000
    const gone = await refresh(back.body.refresh_token)
    expect(gone.status).toBe(400)
    expect(gone.body.error).toBe('invalid_grant')
    expect(audits('account.gone')).toMatchObject([{ sub: 'corp:alice', provider: 'corp' }])
  })
})

describe('the device flow', () => {
  it('the user signs in at the provider from the verification page, then approves; the device gets tokens for the federated user', async () => {
    setup = await startFederated([{ id: 'corp', upstream: { accounts: ACCOUNTS } }], {
      clients: [{ client_id: 'tv', token_endpoint_auth_method: 'none', grant_types: ['urn:ietf:params:oauth:grant-type:device_code'], scopes: ['orders:read'] }],
    })
    const { gateway, upstreams: [upstream] } = setup
    const device = await postForm(gateway, '/device_authorization', { client_id: 'tv', scope: 'orders:read' })
    expect(device.status).toBe(200)
    const browser = new FormBrowser(gateway.url)
    const start = await browser.get(`/device?user_code=${String(device.body.user_code)}`)
    let res = await throughUpstream(browser, upstream!, start, 'alice')
    res = await browser.get(res.location!)
    expect(res.location).toContain('/device?user_code=')
    const entry = await browser.get(res.location!)
    const confirm = await browser.post('/device', { _csrf: field(entry, '_csrf'), user_code: String(device.body.user_code) })
    const approved = await browser.post('/device', { _csrf: field(confirm, '_csrf'), user_code: field(confirm, 'user_code'), decision: 'approve' })
    expect(approved.status).toBe(200)
    const token = await postForm(gateway, '/token', { grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: String(device.body.device_code), client_id: 'tv' })
    expect(token.status).toBe(200)
    expect(jwtPayload(token.body.access_token)).toMatchObject({ sub: 'corp:alice', groups: ['staff'] })
  })
})

describe('client authentication at the provider', () => {
  it('private_key_jwt (RFC 7523): the code is exchanged with a signed assertion, no secret sent', async () => {
    const key = await generateKeyPair('ES256', { extractable: true })
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-pkjwt-'))
    writeFileSync(path.join(dir, 'client-key.pem'), await exportPKCS8(key.privateKey))
    const jwk = { ...await exportJWK(key.publicKey), kid: 'portcullis-1', alg: 'ES256', use: 'sig' }
    setup = await startFederated([{
      id: 'corp', upstream: { accounts: ACCOUNTS },
      client: { client_secret: undefined, token_endpoint_auth_method: 'private_key_jwt', token_endpoint_auth_signing_alg: 'ES256', jwks: { keys: [jwk] } },
      config: { client_secret: undefined, private_key_jwt: { key_file: 'client-key.pem', alg: 'ES256', kid: 'portcullis-1' } },
    }], {}, {}, { dir })
    const { gateway, upstreams: [upstream] } = setup
    const tokens = await redeem(gateway, (await federatedSignIn(new FormBrowser(gateway.url), upstream!, 'alice')).location)
    expect(jwtPayload(tokens.access_token).sub).toBe('corp:alice')
  })
})
