/**
 * Metadata (checklist §7) and /jwks (§8) over HTTP on loopback, read by fetch and by a strict client
 * (oauth4webapi). The handlers are mounted on a fastify instance of their own, with a context built from a
 * real config, a memory store and a real KeyManager; time comes from an injected clock.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import { SignJWT } from 'jose'
import * as oauth from 'oauth4webapi'
import { describe, expect, it, onTestFinished } from 'vitest'
import { silentAudit } from '../../src/audit/audit.js'
import { ClientRegistry } from '../../src/authserver/clients.js'
import { Metrics } from '../../src/metrics/metrics.js'
import type { AuthServerContext, SigningAlgorithm } from '../../src/authserver/context.js'
import { jwksMaxAgeSeconds, registerJwks } from '../../src/authserver/endpoints/jwks.js'
import { registerMetadata } from '../../src/authserver/endpoints/metadata.js'
import { KeyManager } from '../../src/authserver/keys.js'
import { RevocationList } from '../../src/authserver/revocations.js'
import { resolveSettings } from '../../src/authserver/settings.js'
import { createMemoryAdapter } from '../../src/authserver/storage/memory.js'
import { TokenService } from '../../src/authserver/tokens.js'
import { UserDirectory } from '../../src/authserver/users.js'
import type { ClientConfig } from '../../src/config/schema.js'
import { memoryReplayCache } from '../../src/dpop/replay.js'
import { AccountDirectory } from '../../src/authserver/federation/accounts.js'
import { IdentityProviders } from '../../src/authserver/federation/providers.js'

/** What plugin.ts passes today: the back-channel endpoints and the grants some client is registered for. */
const TODAY = ['token', 'revocation', 'introspection', 'jwks', 'grant:client_credentials', 'grant:refresh_token', 'grant:password']
const BROWSER_FLOWS = [...TODAY, 'authorization', 'userinfo', 'device_authorization', 'id_token', 'grant:authorization_code',
  'grant:urn:ietf:params:oauth:grant-type:device_code']

const SVC: ClientConfig = {
  client_id: 'svc', client_secret: '0123456789abcdef0123', grant_types: ['client_credentials'], scopes: ['orders:read', 'orders:write'],
}
const FIRST_PARTY: ClientConfig = {
  client_id: 'fp', client_secret: '0123456789abcdef0123', grant_types: ['password', 'refresh_token'], first_party: true,
  scopes: ['openid', 'orders:read'],
}

interface Started {
  /** The origin, `http://127.0.0.1:PORT`. */
  origin: string
  issuer: string
  paths: string[]
  keys: KeyManager
  time: { now: () => number; set(ms: number): void }
}

interface StartOptions {
  /** The issuer's path: '' (root), '/', '/p', '/p/'. */
  issuerPath?: string
  algorithm?: SigningAlgorithm
  clients?: ClientConfig[]
  implemented?: string[]
  publishDelay?: string
}

/** Listens first (the issuer names the port), then hands the server to fastify. */
async function startAuthServer(options: StartOptions = {}): Promise<Started> {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const issuer = origin + (options.issuerPath ?? '')
  let time = Date.now()
  const now = () => time
  const clients = options.clients ?? [SVC, FIRST_PARTY]
  const settings = resolveSettings({
    enabled: true,
    issuer,
    store: { type: 'memory' },
    signing: { algorithm: options.algorithm ?? 'ES256', ...(options.publishDelay && { rotation_publish_delay: options.publishDelay }) },
    access_token: { audience: ['orders-api'] },
    clients,
  })
  const app = Fastify({ logger: false, serverFactory: (handler) => server.on('request', handler) })
  const store = createMemoryAdapter({ now })
  const keys = await KeyManager.open(store, {
    algorithm: settings.algorithm, publishDelayMs: settings.publishDelayMs, retireAfterSeconds: settings.accessTokenTtlSeconds,
    now, log: app.log, reloadIntervalMs: 0,
  })
  const unlimited = { reserve: async () => ({ keep: () => {}, release: async () => {} }) }
  const ctx: AuthServerContext = {
    settings, store, keys, now, log: app.log,
    clients: new ClientRegistry(clients),
    users: new UserDirectory([]),
    accounts: new AccountDirectory(new UserDirectory([]), store, { providers: new Set(), ttlSeconds: 60, kek: undefined }),
    identityProviders: await IdentityProviders.open([], false, now),
    tokens: new TokenService(settings, keys, store, now),
    revocations: new RevocationList(store, now),
    throttle: unlimited,
    userCodeThrottle: unlimited,
    interactionThrottle: unlimited,
    metrics: new Metrics({ defaultMetrics: false }),
    audit: silentAudit,
    dpopReplay: memoryReplayCache(1000),
  }
  const paths = [...registerJwks(app, ctx), ...registerMetadata(app, ctx, { implemented: new Set(options.implemented ?? TODAY) })]
  await app.ready()
  onTestFinished(async () => {
    keys.close()
    await app.close()
    if (server.listening) await new Promise((resolve) => server.close(resolve))
  })
  return { origin, issuer, paths, keys, time: { now, set: (ms) => { time = ms } } }
}

const get = (url: string, init: RequestInit = {}) => fetch(url, { redirect: 'manual', ...init })
const json = async (response: Response) => JSON.parse(await response.text()) as Record<string, unknown>

async function documents(started: Started): Promise<{ rfc8414: Record<string, unknown>; oidc: Record<string, unknown> }> {
  const prefix = new URL(started.issuer).pathname.replace(/\/+$/, '')
  const [rfc8414, oidc] = await Promise.all([
    get(`${started.origin}/.well-known/oauth-authorization-server${prefix}`),
    get(`${started.origin}${prefix}/.well-known/openid-configuration`),
  ])
  expect([rfc8414.status, oidc.status]).toEqual([200, 200])
  return { rfc8414: await json(rfc8414), oidc: await json(oidc) }
}

/** Every value, recursively, with its path: for the no-null / no-empty-array rule. */
function* walk(value: unknown, at = '$'): Generator<[string, unknown]> {
  yield [at, value]
  if (Array.isArray(value)) for (const [index, item] of value.entries()) yield* walk(item, `${at}[${index}]`)
  else if (value !== null && typeof value === 'object') for (const [key, item] of Object.entries(value)) yield* walk(item, `${at}.${key}`)
}

/** An RFC 9068 access token signed with the current key, as the token service signs them. */
async function accessToken(started: Started, alg: SigningAlgorithm = 'ES256'): Promise<string> {
  const key = started.keys.current(alg)
  const iat = Math.floor(started.time.now() / 1000)
  return new SignJWT({ client_id: 'svc', scope: 'orders:read' })
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'at+jwt' })
    .setIssuer(started.issuer).setSubject('svc').setAudience('orders-api')
    .setIssuedAt(iat).setExpirationTime(iat + 3600).setJti(crypto.randomUUID())
    .sign(key.privateKey)
}

/** oauth4webapi's RFC 9068 validation, with its own fresh JWKS cache; `skew` aligns its clock with ours. */
async function o4wValidates(started: Started, token: string): Promise<oauth.JWTAccessTokenClaims> {
  const as = await oauth.processDiscoveryResponse(new URL(started.issuer),
    await oauth.discoveryRequest(new URL(started.issuer), { algorithm: 'oauth2', [oauth.allowInsecureRequests]: true }))
  const request = new Request('https://api.example.com/orders', { headers: { authorization: `Bearer ${token}` } })
  return oauth.validateJwtAccessToken({ ...as, [oauth.clockSkew]: Math.round((started.time.now() - Date.now()) / 1000) } as oauth.AuthorizationServer,
    request, 'orders-api', { [oauth.allowInsecureRequests]: true })
}

describe('metadata (checklist §7)', () => {
  it('MD-01 at a root issuer both documents answer 200 application/json', async () => {
    const started = await startAuthServer()
    expect(started.paths).toEqual(expect.arrayContaining(['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']))
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const response = await get(started.origin + path)
      expect(response.status).toBe(200)
      expect(response.headers.get('content-type')).toBe('application/json')
    }
  })

  it('MD-01 with an issuer path the RFC 8414 document has the well-known segment inserted, the OIDC one appended', async () => {
    const started = await startAuthServer({ issuerPath: '/p' })
    expect(started.paths).toEqual(['/p/jwks', '/.well-known/oauth-authorization-server/p', '/p/.well-known/openid-configuration'])
    expect((await get(`${started.origin}/.well-known/oauth-authorization-server/p`)).status).toBe(200)
    expect((await get(`${started.origin}/p/.well-known/openid-configuration`)).status).toBe(200)
    expect((await get(`${started.origin}/.well-known/oauth-authorization-server`)).status).toBe(404)
  })

  it('MD-02 issuer is the configured string byte for byte in both documents, and oauth4webapi accepts both', async () => {
    for (const issuerPath of ['', '/', '/p', '/p/']) {
      const started = await startAuthServer({ issuerPath })
      const { rfc8414, oidc } = await documents(started)
      expect(rfc8414.issuer).toBe(started.issuer)
      expect(oidc.issuer).toBe(started.issuer)
      for (const algorithm of ['oauth2', 'oidc'] as const) {
        const response = await oauth.discoveryRequest(new URL(started.issuer), { algorithm, [oauth.allowInsecureRequests]: true })
        const as = await oauth.processDiscoveryResponse(new URL(started.issuer), response)
        expect(as.issuer).toBe(started.issuer)
      }
    }
  })

  it('MD-03 lists what is implemented today, grant types explicitly, and nothing of the browser flows', async () => {
    const started = await startAuthServer({ issuerPath: '/p' })
    const base = `${started.origin}/p`
    expect((await documents(started)).rfc8414).toStrictEqual({
      issuer: started.issuer,
      token_endpoint: `${base}/token`,
      jwks_uri: `${base}/jwks`,
      revocation_endpoint: `${base}/revoke`,
      introspection_endpoint: `${base}/introspect`,
      scopes_supported: ['orders:read', 'orders:write', 'openid'],
      grant_types_supported: ['client_credentials', 'refresh_token', 'password'],
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
      revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
      introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
      subject_types_supported: ['public'],
    })
  })

  it('MD-03 once the browser flows and ID tokens are implemented, their members appear', async () => {
    const started = await startAuthServer({ implemented: BROWSER_FLOWS })
    const { rfc8414 } = await documents(started)
    expect(rfc8414).toMatchObject({
      authorization_endpoint: `${started.origin}/authorize`,
      userinfo_endpoint: `${started.origin}/userinfo`,
      device_authorization_endpoint: `${started.origin}/device_authorization`,
      response_types_supported: ['code'],
      response_modes_supported: ['query'],
      grant_types_supported: ['authorization_code', 'client_credentials', 'refresh_token', 'password', 'urn:ietf:params:oauth:grant-type:device_code'],
      code_challenge_methods_supported: ['S256'],
      id_token_signing_alg_values_supported: ['ES256', 'RS256'],
      authorization_response_iss_parameter_supported: true,
    })
  })

  it('MD-03 id_token_signing_alg_values_supported is the configured alg plus RS256, each once', async () => {
    for (const [algorithm, expected] of [['EdDSA', ['EdDSA', 'RS256']], ['RS256', ['RS256']]] as const) {
      const started = await startAuthServer({ algorithm, implemented: BROWSER_FLOWS })
      expect((await documents(started)).oidc.id_token_signing_alg_values_supported).toEqual(expected)
    }
  })

  it('MD-03 password is listed only when some client is registered for it', async () => {
    const started = await startAuthServer({ clients: [SVC] })
    expect((await documents(started)).rfc8414.grant_types_supported).toEqual(['client_credentials', 'refresh_token'])
  })

  it('MD-04 no null and no empty array, the same body in both documents, every URL absolute under the issuer', async () => {
    for (const implemented of [TODAY, BROWSER_FLOWS]) {
      const started = await startAuthServer({ issuerPath: '/p', implemented })
      const [rfc8414, oidc] = await Promise.all([
        get(`${started.origin}/.well-known/oauth-authorization-server/p`).then((response) => response.text()),
        get(`${started.origin}/p/.well-known/openid-configuration`).then((response) => response.text()),
      ])
      expect(oidc).toBe(rfc8414)
      for (const [at, value] of walk(JSON.parse(rfc8414))) {
        expect(value, at).not.toBeNull()
        if (Array.isArray(value)) expect(value.length, at).toBeGreaterThan(0)
      }
      for (const [member, value] of Object.entries(JSON.parse(rfc8414) as Record<string, unknown>)) {
        if (member.endsWith('_endpoint') || member === 'jwks_uri') expect(value as string).toMatch(new RegExp(`^${started.issuer}/[a-z_]+$`))
      }
    }
  })

  it('MD-04 scopes_supported is left out when no client has a scope', async () => {
    const started = await startAuthServer({ clients: [{ ...SVC, scopes: [] }] })
    expect((await documents(started)).rfc8414).not.toHaveProperty('scopes_supported')
  })

  it('MD-05 both documents may be cached for five minutes and read from any origin', async () => {
    const started = await startAuthServer()
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const response = await get(started.origin + path, { headers: { origin: 'https://spa.example.com' } })
      expect(response.headers.get('cache-control')).toBe('public, max-age=300')
      expect(response.headers.get('access-control-allow-origin')).toBe('*')
      const preflight = await get(started.origin + path, {
        method: 'OPTIONS', headers: { origin: 'https://spa.example.com', 'access-control-request-method': 'GET' },
      })
      expect(preflight.status).toBe(204)
      expect(preflight.headers.get('access-control-allow-origin')).toBe('*')
      expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, HEAD')
    }
  })

  it('MD-05 G-08 unknown well-known paths and trailing-slash variants answer 404, never a redirect', async () => {
    const started = await startAuthServer({ issuerPath: '/p' })
    for (const path of [
      '/.well-known/oauth-authorization-server/p/', '/p/.well-known/openid-configuration/', '/p/jwks/', '/p/.well-known/unknown',
      '/.well-known/oauth-authorization-server/q', '/.well-known/openid-configuration',
    ]) {
      const response = await get(started.origin + path)
      expect(response.status, path).toBe(404)
    }
  })

  it('G-11 other methods get 405 with Allow: GET, HEAD and a JSON error; HEAD answers the headers only', async () => {
    const started = await startAuthServer()
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration', '/jwks']) {
      for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
        const response = await get(started.origin + path, { method })
        expect(response.status, `${method} ${path}`).toBe(405)
        expect(response.headers.get('allow')).toBe('GET, HEAD')
        expect(await json(response)).toMatchObject({ error: 'method_not_allowed' })
      }
      const head = await get(started.origin + path, { method: 'HEAD' })
      expect(head.status).toBe(200)
      expect(head.headers.get('content-type')).toMatch(/json/)
      expect(await head.text()).toBe('')
    }
  })
})

describe('/jwks (checklist §8)', () => {
  it('JW-01 answers 200 application/jwk-set+json with a keys array; JW-02 public members only; JW-03 kid, use, alg', async () => {
    const started = await startAuthServer()
    const response = await get(`${started.origin}/jwks`)
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('application/jwk-set+json')
    expect(response.headers.get('access-control-allow-origin')).toBe('*')
    const { keys } = await json(response) as { keys: Record<string, unknown>[] }
    expect(keys.map((key) => key.alg).sort()).toEqual(['ES256', 'RS256'])
    for (const key of keys) {
      expect(Object.keys(key).sort()).toEqual(key.kty === 'RSA'
        ? ['alg', 'e', 'kid', 'kty', 'n', 'use'] : ['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y'])
      expect(key.use).toBe('sig')
    }
    expect(keys.find((key) => key.alg === 'ES256')!.crv).toBe('P-256')
  })

  it('JW-05 the JWKS may be cached for much less than the rotation publish delay', async () => {
    const started = await startAuthServer()
    const maxAge = Number(/max-age=(\d+)/.exec((await get(`${started.origin}/jwks`)).headers.get('cache-control') ?? '')![1])
    expect(maxAge).toBeGreaterThan(0)
    expect(maxAge * 1000).toBeLessThanOrEqual(5 * 60_000 / 5)
    expect(jwksMaxAgeSeconds(60_000)).toBe(12)
    expect(jwksMaxAgeSeconds(3_600_000)).toBe(60)
    expect(jwksMaxAgeSeconds(0)).toBe(0)
  })

  it('JW-04 oauth4webapi validates an RFC 9068 access token by resolving its kid against /jwks', async () => {
    const started = await startAuthServer()
    const claims = await o4wValidates(started, await accessToken(started))
    expect(claims).toMatchObject({ iss: started.issuer, client_id: 'svc', aud: 'orders-api' })
  })

  it('JW-05 across a rotation /jwks has both kids, tokens of either key validate, and the old kid leaves after retirement', async () => {
    const started = await startAuthServer({ publishDelay: '5m' })
    const kids = async () => ((await json(await get(`${started.origin}/jwks`))).keys as { kid: string }[]).map((key) => key.kid).sort()
    const oldKid = started.keys.current('ES256').kid
    const t1 = await accessToken(started)
    const rotation = await started.keys.rotate()
    expect(await kids()).toEqual([...rotation.retiring, ...rotation.added].sort())
    await expect(o4wValidates(started, t1)).resolves.toMatchObject({ client_id: 'svc' })

    started.time.set(rotation.activatesAt)
    const t2 = await accessToken(started)
    expect(started.keys.current('ES256').kid).not.toBe(oldKid)
    await expect(o4wValidates(started, t2)).resolves.toMatchObject({ client_id: 'svc' })
    await expect(o4wValidates(started, t1)).resolves.toMatchObject({ client_id: 'svc' })

    started.time.set(rotation.retiresAt)
    expect(await kids()).toEqual([...rotation.added].sort())
  })
})
