/**
 * GitHub's OAuth 2.0 endpoints and the REST API parts the GitHub connector reads, on 127.0.0.1:0 (GitHub itself is
 * not reachable from here): authorize (approves at once), access_token (checks the secret, the code and the PKCE
 * verifier; a refusal is 200 with `error`, as GitHub does), /user, /user/emails, /user/orgs, /user/teams.
 */
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface FakeGitHub {
  readonly url: string
  readonly authorizations: URLSearchParams[]
  /** The user /user answers with. */
  user: Record<string, unknown>
  emails: Array<{ email: string; primary: boolean; verified: boolean }>
  orgs: string[]
  teams: Array<{ org: string; slug: string }>
  /** The access token was revoked (or the account deleted): the API answers 401. */
  revoked: boolean
  close(): Promise<void>
}

export const GITHUB_CLIENT = { client_id: 'Iv1.portcullis', client_secret: 'github-secret-0123456789abcdef' }

export async function startFakeGitHub(): Promise<FakeGitHub> {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const challenges = new Map<string, string>()
  const fake: FakeGitHub = {
    url,
    authorizations: [],
    user: { id: 4242, login: 'octocat', name: 'The Octocat', email: 'public-but-unverified@example.com' },
    emails: [{ email: 'octo@example.com', primary: true, verified: true }, { email: 'octo@other.example', primary: false, verified: true }],
    orgs: ['acme'],
    teams: [{ org: 'acme', slug: 'platform' }],
    revoked: false,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
  const json = (res: http.ServerResponse, status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  server.on('request', (req, res) => {
    const at = new URL(req.url ?? '/', url)
    if (at.pathname === '/login/oauth/authorize') {
      fake.authorizations.push(at.searchParams)
      const code = `gh-code-${fake.authorizations.length}`
      challenges.set(code, at.searchParams.get('code_challenge') ?? '')
      const back = new URL(at.searchParams.get('redirect_uri')!)
      back.searchParams.set('code', code)
      back.searchParams.set('state', at.searchParams.get('state') ?? '')
      res.writeHead(302, { location: back.href }).end()
      return
    }
    if (at.pathname === '/login/oauth/access_token' && req.method === 'POST') {
      let body = ''
      req.on('data', (chunk: Buffer) => { body += chunk.toString() })
      req.on('end', () => {
        const form = new URLSearchParams(body)
        const challenge = challenges.get(form.get('code') ?? '')
        challenges.delete(form.get('code') ?? '')
        const verified = challenge !== undefined && createHash('sha256').update(form.get('code_verifier') ?? '').digest('base64url') === challenge
        if (form.get('client_secret') !== GITHUB_CLIENT.client_secret) return json(res, 200, { error: 'incorrect_client_credentials' })
        if (!verified) return json(res, 200, { error: 'bad_verification_code' })
        return json(res, 200, { access_token: 'gho_test_token', token_type: 'bearer', scope: 'read:user,user:email,read:org' })
      })
      return
    }
    if (req.headers.authorization !== 'Bearer gho_test_token' || fake.revoked) return json(res, 401, { message: 'Bad credentials' })
    if (at.pathname === '/user') return json(res, 200, fake.user)
    if (at.pathname === '/user/emails') return json(res, 200, fake.emails)
    if (at.pathname === '/user/orgs') return json(res, 200, fake.orgs.map((login) => ({ login })))
    if (at.pathname === '/user/teams') return json(res, 200, fake.teams.map(({ org, slug }) => ({ slug, organization: { login: org } })))
    return json(res, 404, { message: 'Not Found' })
  })
  return fake
}
