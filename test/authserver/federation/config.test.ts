/**
 * What `portcullis check` says of `identity_providers`, `access_token.claims` and `post_logout_redirect_uris`:
 * the configurations that could not work, and those that would let the wrong people in.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { loadConfigFile } from '../../../src/check/load.js'
import { configProblems } from '../../support/config-problems.js'

function config(as: Record<string, unknown>, server: Record<string, unknown> = {}): string {
  return stringify({
    server,
    upstreams: { main: { url: 'http://127.0.0.1:9001' } },
    routes: [{ id: 'all', path: '/**', upstream: 'main' }],
    authorization_server: { enabled: true, issuer: 'https://auth.example.com', store: { type: 'sqlite', path: '/tmp/x.db' }, ...as },
  })
}

const idp = (extra: Record<string, unknown> = {}) => ({ id: 'corp', issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', ...extra })
const problems = (as: Record<string, unknown>, server?: Record<string, unknown>) => configProblems(config(as, server))

describe('identity_providers in check', () => {
  it('a complete provider passes', () => {
    expect(problems({ identity_providers: [idp()] })).toEqual([])
  })

  it('an OpenID Connect provider needs an issuer; GitHub takes none, and needs a secret', () => {
    expect(problems({ identity_providers: [idp({ issuer: undefined })] })).toEqual([
      'authorization_server.identity_providers[0]: missing required key "issuer" (its OpenID Connect discovery starts there)'])
    expect(problems({ identity_providers: [{ id: 'gh', preset: 'github', client_id: 'c', issuer: 'https://github.com' }] })).toEqual([
      'authorization_server.identity_providers[0]: GitHub needs client_secret or client_secret_file',
      'authorization_server.identity_providers[0].issuer: GitHub is not an OpenID Connect issuer: set github.web_url and github.api_url for GitHub Enterprise Server'])
    expect(problems({ identity_providers: [{ id: 'google', preset: 'google', client_id: 'c', client_secret: 's' }] })).toEqual([])
  })

  it('two credentials, an unreadable secret file, a duplicate id, a bad id', () => {
    expect(problems({ identity_providers: [idp({ client_secret_file: '/nonexistent/secret' })] })).toEqual([
      'authorization_server.identity_providers[0]: set at most one of client_secret, client_secret_file and private_key_jwt',
      'authorization_server.identity_providers[0].client_secret_file: cannot read /nonexistent/secret'])
    expect(problems({ identity_providers: [idp(), idp()] })).toEqual(['authorization_server.identity_providers[1].id: duplicate id (also identity_providers[0])'])
    expect(problems({ identity_providers: [idp({ id: 'Corp:1' })] })[0]).toMatch(/identity_providers\[0\]\.id: must be 1-32 lower-case letters/)
  })

  it('http:// off loopback is refused unless server.allow_insecure_http', () => {
    const plain = { identity_providers: [idp({ issuer: 'http://idp.example.com' })] }
    expect(problems(plain)).toEqual([expect.stringMatching(/identity_providers\[0\]\.issuer: uses http:\/\/ off loopback/)])
    expect(problems(plain, { allow_insecure_http: true })).toEqual([])
    expect(problems({ identity_providers: [idp({ issuer: 'http://127.0.0.1:9000' })] })).toEqual([])
    // A name that starts like a loopback address is a name: http:// to it is refused like any other.
    expect(problems({ identity_providers: [idp({ issuer: 'http://127.0.0.1.evil.example' })] })).toEqual([expect.stringMatching(/uses http:\/\/ off loopback/)])
  })

  it('Entra: no e-mail domain rule (Entra does not verify addresses), and a multi-tenant issuer needs allow.tenants', () => {
    expect(problems({ identity_providers: [idp({ preset: 'entra', issuer: 'https://login.microsoftonline.com/0a1b/v2.0', allow: { email_domains: ['example.com'] } })] })).toEqual([
      'authorization_server.identity_providers[0].allow.email_domains: entra does not verify e-mail addresses: anyone can claim any domain there (use allow.tenants or allow.groups)'])
    expect(problems({ identity_providers: [idp({ preset: 'entra', issuer: 'https://login.microsoftonline.com/organizations/v2.0' })] })).toEqual([
      'authorization_server.identity_providers[0].allow: a multi-tenant Entra issuer lets every tenant\'s users in: set allow.tenants to the tenant ids you trust'])
    expect(problems({ identity_providers: [idp({ preset: 'entra', issuer: 'https://login.microsoftonline.com/organizations/v2.0', allow: { tenants: ['0a1b'] } })] })).toEqual([])
  })

  it('refresh_check seals upstream tokens: it needs signing.key_encryption_key, and offline_access when scopes are set', () => {
    expect(problems({ identity_providers: [idp({ refresh_check: true, scopes: ['openid'] })] })).toEqual([
      'authorization_server.identity_providers[0].refresh_check: keeps each user\'s upstream refresh token in the store: set signing.key_encryption_key to seal them',
      'authorization_server.identity_providers[0].scopes: refresh_check needs offline_access (an upstream refresh token to ask with)'])
    expect(problems({ signing: { key_encryption_key: Buffer.alloc(32, 1).toString('base64') }, identity_providers: [idp({ refresh_check: true })] })).toEqual([])
  })

  it('claim paths are checked; a local user cannot sit in a provider\'s namespace', () => {
    expect(problems({ identity_providers: [idp({ claims: { roles: 'realm_access..roles' } })] })[0]).toMatch(/identity_providers\[0\]\.claims\.roles/)
    expect(problems({ identity_providers: [idp()], users: [{ username: 'corp:alice', password: 'p' }] })).toEqual([
      'authorization_server.users[0].username: subject "corp:alice" is in the namespace of identity provider corp'])
  })

  it('a secret file relative to the config file is read from beside it', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-idp-'))
    writeFileSync(path.join(dir, 'secret'), 'from-a-file\n')
    const file = path.join(dir, 'portcullis.yaml')
    const text = config({ identity_providers: [idp({ client_secret: undefined, client_secret_file: 'secret' })] })
    writeFileSync(file, text)
    const loaded = loadConfigFile(file, {})
    expect(loaded.authorization_server?.identity_providers?.[0]?.client_secret_file).toBe(path.join(dir, 'secret'))
  })
})

describe('access_token.claims and post_logout_redirect_uris in check', () => {
  it('the claims the server sets itself are refused', () => {
    expect(problems({ access_token: { claims: ['groups', 'sub', 'cnf'] } })).toEqual([
      'authorization_server.access_token.claims[1]: sub is set by the server itself (RFC 9068 §2.2)',
      'authorization_server.access_token.claims[2]: cnf is set by the server itself (RFC 9068 §2.2)'])
  })

  it('post-logout redirect URIs follow the redirect URI rules', () => {
    const client = { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code'], redirect_uris: ['https://app.example.com/cb'], scopes: ['openid'] }
    expect(problems({ clients: [{ ...client, post_logout_redirect_uris: ['http://app.example.com/bye', 'https://app.example.com/*'] }] })).toEqual([
      'authorization_server.clients[0].post_logout_redirect_uris[0]: http: is only allowed for loopback IP literals (127.0.0.1, [::1]); use https:',
      'authorization_server.clients[0].post_logout_redirect_uris[1]: must not contain a wildcard'])
  })
})
