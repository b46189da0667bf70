/**
 * `preset: github`: OAuth 2.0 with PKCE, the user from GitHub's REST API (a stand-in on 127.0.0.1 speaking GitHub's
 * protocol, GitHub itself being out of reach): the numeric id as subject, only the verified primary e-mail, orgs
 * and teams as groups, and `refresh_check` by reading /user with the kept token.
 */
import { afterEach, beforeEach, expect, it } from 'vitest'
import { FormBrowser } from '../../support/browser.js'
import { APP_CLIENT, authorizeUrl, finishAtUs, jwtPayload, redeem } from '../../support/federation.js'
import { GITHUB_CLIENT, startFakeGitHub, type FakeGitHub } from '../../support/fake-github.js'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { postForm } from '../../support/authserver.js'

let github: FakeGitHub
let gateway: RunningGateway & { issuer: string }
let clock = Date.now()

beforeEach(async () => {
  github = await startFakeGitHub()
  gateway = await startAuthServerGateway({
    access_token: { audience: ['orders-api'], claims: ['groups', 'email'] },
    clients: [APP_CLIENT],
    identity_providers: [{
      id: 'github', preset: 'github', ...GITHUB_CLIENT, github: { web_url: github.url, api_url: github.url },
      allow: { groups: ['acme/platform'] }, refresh_check: true,
    }],
  }, {}, { now: () => clock })
})
afterEach(async () => {
  await gateway.close()
  await github.close()
})

async function signIn(browser: FormBrowser) {
  let res = await browser.get(authorizeUrl())
  res = await browser.get(res.location!)
  expect(res.location!.startsWith(`${github.url}/login/oauth/authorize?`)).toBe(true)
  res = await browser.get(res.location!)
  return finishAtUs(browser, res)
}

it('signs in with PKCE S256; the subject is the numeric id, the e-mail the verified primary one, the groups orgs and org/team', async () => {
  const tokens = await redeem(gateway, (await signIn(new FormBrowser(gateway.url))).location)
  const asked = github.authorizations[0]!
  expect(Object.fromEntries(asked)).toMatchObject({ client_id: GITHUB_CLIENT.client_id, scope: 'read:user user:email read:org', code_challenge_method: 'S256' })
  expect(jwtPayload(tokens.access_token)).toMatchObject({ sub: 'github:4242', email: 'octo@example.com', groups: ['acme', 'acme/platform'] })
})

it('someone outside the allowed team: access_denied to the client', async () => {
  github.teams = [{ org: 'acme', slug: 'sales' }]
  const res = await signIn(new FormBrowser(gateway.url))
  expect(new URL(res.location!).searchParams.get('error')).toBe('access_denied')
})

it('a refused code exchange (GitHub answers 200 with error): a page, no session', async () => {
  const browser = new FormBrowser(gateway.url)
  let res = await browser.get(authorizeUrl())
  res = await browser.get(res.location!)
  res = await browser.get(res.location!)
  // The code is spent once: replaying GitHub's answer to another browser's start is refused before any exchange.
  const callback = new URL(res.location!)
  callback.searchParams.set('code', 'gh-code-forged')
  const page = await browser.get(callback.href)
  expect(page.status).toBe(400)
  expect(browser.cookies.has('portcullis_session')).toBe(false)
})

it('refresh_check: a token GitHub no longer honours ends the refresh with invalid_grant', async () => {
  const tokens = await redeem(gateway, (await signIn(new FormBrowser(gateway.url))).location)
  const refresh = (token: unknown) => postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: String(token), client_id: 'spa' })
  const first = await refresh(tokens.refresh_token)
  expect(first.status).toBe(200)
  github.revoked = true
  clock += 31_000
  const gone = await refresh(first.body.refresh_token)
  expect(gone.status).toBe(400)
  expect(gone.body.error).toBe('invalid_grant')
})
