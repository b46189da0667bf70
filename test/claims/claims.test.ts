/**
 * Issue 17 end to end on the real process: named path parameters, claim conditions, claim headers and
 * permissions read from any claim, with the README's multi-tenant example run as written. Every refusal
 * asserts the answer, that nothing reached the upstream, and that the reason is in the log and the
 * metrics but not in the body.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { parse, stringify } from 'yaml'
import { runPortcullis, type RunningPortcullis } from '../../src/server/run.js'
import { basic, postForm } from '../support/authserver.js'
import { startAuthServerGateway } from '../support/gateway.js'
import { startIntrospectionServer, type TestIntrospectionServer } from '../support/introspection.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { scrape, valueOf } from '../support/prometheus.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { lineCollector } from '../support/logs.js'
import { Client } from 'undici'

/** The YAML block of the README's "Example: one API, many tenants", as a user would copy it. */
function readmeExample(): { issuers: Array<Record<string, unknown>>; routes: Array<Record<string, unknown>> } {
  const readme = readFileSync('README.md', 'utf8')
  const section = readme.slice(readme.indexOf('### Example: one API, many tenants'))
  const block = /```yaml\n([\s\S]*?)```/.exec(section)
  if (!block) throw new Error('the README lost its multi-tenant example')
  return parse(block[1]!) as ReturnType<typeof readmeExample>
}

const OPAQUE_ISSUER = 'https://keycloak.example/realms/acme'

interface Env {
  running: RunningPortcullis
  url: string
  metricsUrl: string
  file: string
  logs: string[]
  upstream: RecordingUpstream
  issuer: TestIssuer
  idp: TestIntrospectionServer
  config: Record<string, unknown>
}

let env: Env

function buildConfig(upstream: RecordingUpstream, issuer: TestIssuer, idp: TestIntrospectionServer): Record<string, unknown> {
  const example = readmeExample()
  const exampleIssuer = { ...example.issuers[0]!, issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }
  return {
    server: { listen: '127.0.0.1:0', realm: 'test' },
    admin: { listen: '127.0.0.1:0' },
    upstreams: { orders: { url: upstream.url, timeout: '2s' } },
    issuers: [
      { ...exampleIssuer, claim_headers: { 'X-Org-Region': 'org.region' } },
      {
        issuer: OPAQUE_ISSUER, audience: ['orders-api'], scope_claim: ['scope', 'realm_access.roles'],
        introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, token_prefix: 'kc_' },
      },
    ],
    routes: [
      ...example.routes,
      // A header from the request must equal a claim; the tenant from the end of the path, after a `**`.
      { id: 'by-header', path: '/by-header/**', upstream: 'orders', claims: { all: [{ claim: 'tenant', equals: { header: 'X-Tenant-Id' } }] } },
      { id: 'invoice', path: '/archive/**/{tenant}', upstream: 'orders', claims: { all: [{ claim: 'tenants', contains: { param: 'tenant' } }] } },
      // Claim headers only, and a route header that overrides the issuer's.
      { id: 'headers', path: '/headers/**', upstream: 'orders',
        claim_headers: { 'X-Groups': 'groups', 'X-Level': 'level', 'X-Verified': 'email_verified', 'X-Org-Region': 'org.name', 'X-Url-Claim': '["https://example.com/roles"]' } },
      { id: 'public', path: '/public/**', upstream: 'orders', auth: 'none' },
      // Permissions from realm_access.roles: a role is asked for as a scope.
      { id: 'role', path: '/role/**', upstream: 'orders', scopes: { all: ['orders-admin'] } },
    ],
    log: { level: 'info' },
  }
}

beforeAll(async () => {
  const [upstream, issuer, idp] = await Promise.all([startRecordingUpstream(), startTestIssuer(), startIntrospectionServer()])
  const config = buildConfig(upstream, issuer, idp)
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-claims-'))
  const file = path.join(dir, 'portcullis.yaml')
  writeFileSync(file, stringify(config))
  const { lines: logs, stream: logStream } = lineCollector()
  const running = await runPortcullis(file, { port: 0, adminPort: 0, watch: false, logStream })
  env = {
    running, file, logs, upstream, issuer, idp, config,
    url: `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}`,
    metricsUrl: `http://127.0.0.1:${(running.admin!.server.address() as AddressInfo).port}/metrics`,
  }
})

afterAll(async () => {
  await env.running.shutdown('test')
  await Promise.all([env.upstream.close(), env.issuer.close(), env.idp.close()])
})

beforeEach(() => {
  env.upstream.requests.length = 0
  env.logs.length = 0
})

function get(pathname: string, token?: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${env.url}${pathname}`, { headers: { ...headers, ...(token !== undefined && { authorization: `Bearer ${token}` }) } })
}

const READER = { scope: 'orders:read', tenant: 'acme', realm_access: { roles: ['orders-reader', 'auditor'] } }

/** The `reason` of each "request denied" log line. */
function deniedReasons(): unknown[] {
  return env.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
}

async function expectAccessDenied(res: Response, reason: string): Promise<void> {
  expect(res.status).toBe(403)
  expect(res.headers.get('www-authenticate')).toBeNull()
  const body = await res.text()
  expect(JSON.parse(body)).toEqual({ error: 'access_denied', error_description: 'the access token does not permit this request' })
  expect(body).not.toContain('claims')
  expect(env.upstream.requests).toHaveLength(0)
  expect(deniedReasons()).toEqual([reason])
}

describe("the README's multi-tenant example", () => {
  it('forwards a token to its own tenant, with the tenant and roles as headers and the spoofed copies gone', async () => {
    const token = await env.issuer.sign(READER)
    const res = await get('/tenants/acme/orders/7', token, { 'x-tenant': 'globex', 'x-roles': 'orders-admin' })
    expect(res.status).toBe(200)
    expect(env.upstream.requests).toHaveLength(1)
    const headers = env.upstream.requests[0]!.headers
    expect(headers['x-tenant']).toBe('acme')
    expect(headers['x-roles']).toBe('orders-reader, auditor')
    // Permissions from both claims, in scope_claim order.
    expect(headers['x-auth-scopes']).toBe('orders:read orders-reader auditor')
  })

  it('refuses another tenant with 403 access_denied; the condition is in the log and the metrics only', async () => {
    const token = await env.issuer.sign(READER)
    await expectAccessDenied(await get('/tenants/globex/orders/7', token), 'claims.all[0]: tenant equals {tenant}')
    const metrics = await scrape(env.metricsUrl)
    expect(valueOf(metrics, 'portcullis_authorization_denials_total', { route: 'tenant-orders', condition: 'claims.all[0]' })).toBeGreaterThanOrEqual(1)
    expect(valueOf(metrics, 'portcullis_requests_total',
      { route: 'tenant-orders', method: 'GET', status: '403', decision: 'denied', reason: 'access_denied', protocol: 'http1' })).toBeGreaterThanOrEqual(1)
  })

  it('compares the tenant exactly: case, percent-encoding decoded, never a prefix', async () => {
    const spaced = await env.issuer.sign({ ...READER, tenant: 'acme corp' })
    expect((await get('/tenants/acme%20corp/orders/7', spaced)).status).toBe(200)
    const token = await env.issuer.sign(READER)
    // An encoded unreserved character is refused by path hygiene before any rule is read.
    expect((await get('/tenants/%61cme/orders/7', token)).status).toBe(400)
    env.upstream.requests.length = 0
    env.logs.length = 0
    for (const tenant of ['ACME', 'acme2', 'acm', 'acme%20', 'acme%23x', 'acme%2C']) {
      const res = await get(`/tenants/${tenant}/orders/7`, token)
      expect(res.status, tenant).toBe(403)
      expect(env.upstream.requests, tenant).toHaveLength(0)
    }
  })

  it('refuses a token without the claim, or with it as an array, and one without any listed role', async () => {
    const { tenant: _tenant, ...noTenant } = READER
    await expectAccessDenied(await get('/tenants/acme/orders/7', await env.issuer.sign(noTenant)), 'claims.all[0]: tenant equals {tenant}')
    env.logs.length = 0
    await expectAccessDenied(await get('/tenants/acme/orders/7', await env.issuer.sign({ ...READER, tenant: ['acme'] })), 'claims.all[0]: tenant equals {tenant}')
    env.logs.length = 0
    const noRole = await env.issuer.sign({ ...READER, realm_access: { roles: ['auditor', 'orders-readers'] } })
    await expectAccessDenied(await get('/tenants/acme/orders/7', noRole),
      'claims.any: none of realm_access.roles contains "orders-reader"; realm_access.roles contains "orders-admin"')
  })

  it('checks scopes first: a token of the right tenant without the scope gets insufficient_scope', async () => {
    const res = await get('/tenants/acme/orders/7', await env.issuer.sign({ ...READER, scope: 'profile' }))
    expect(res.status).toBe(403)
    expect(res.headers.get('www-authenticate')).toContain('error="insufficient_scope", error_description="the access token lacks a required scope", scope="orders:read"')
    expect(env.upstream.requests).toHaveLength(0)
    const metrics = await scrape(env.metricsUrl)
    expect(valueOf(metrics, 'portcullis_authorization_denials_total', { route: 'tenant-orders', condition: 'scopes.all' })).toBeGreaterThanOrEqual(1)
  })
})

describe('conditions on request headers and on a parameter after **', () => {
  it('a claim must equal a request header', async () => {
    const token = await env.issuer.sign({ tenant: 't-1' })
    expect((await get('/by-header/x', token, { 'x-tenant-id': 't-1' })).status).toBe(200)
    env.upstream.requests.length = 0
    await expectAccessDenied(await get('/by-header/x', token, { 'x-tenant-id': 't-2' }), 'claims.all[0]: tenant equals header X-Tenant-Id')
    env.logs.length = 0
    await expectAccessDenied(await get('/by-header/x', token), 'claims.all[0]: tenant equals header X-Tenant-Id')
  })

  it('{tenant} after a ** is the last segment, whatever the depth', async () => {
    const token = await env.issuer.sign({ tenants: ['acme', 'initech'] })
    expect((await get('/archive/2024/q3/initech', token)).status).toBe(200)
    expect((await get('/archive/acme', token)).status).toBe(200)
    expect(env.upstream.requests.map((request) => request.url)).toEqual(['/archive/2024/q3/initech', '/archive/acme'])
    env.upstream.requests.length = 0
    await expectAccessDenied(await get('/archive/acme/globex', token), 'claims.all[0]: tenants contains {tenant}')
  })
})

describe('claim headers', () => {
  it('writes strings, numbers, booleans and arrays; a missing claim or an empty array sets nothing; the route beats the issuer', async () => {
    const token = await env.issuer.sign({
      groups: ['eu', 'admins'], level: 3, email_verified: true, org: { name: 'Acme', region: 'eu-west' },
      'https://example.com/roles': [],
    })
    const res = await get('/headers/a', token, { 'x-level': '99', 'x-url-claim': 'forged' })
    expect(res.status).toBe(200)
    const headers = env.upstream.requests[0]!.headers
    expect(headers['x-groups']).toBe('eu, admins')
    expect(headers['x-level']).toBe('3')
    expect(headers['x-verified']).toBe('true')
    expect(headers['x-org-region']).toBe('Acme')
    expect(headers['x-url-claim']).toBeUndefined()
  })

  it("the issuer's mapping applies on every route of its tokens", async () => {
    const res = await get('/by-header/a', await env.issuer.sign({ tenant: 't', org: { region: 'eu-west' } }), { 'x-tenant-id': 't' })
    expect(res.status).toBe(200)
    expect(env.upstream.requests[0]!.headers['x-org-region']).toBe('eu-west')
  })

  it('refuses a token whose mapped claim cannot be one safe header value (401, nothing forwarded)', async () => {
    for (const groups of [{ eu: true }, ['eu', { x: 1 }], ['alice, admin'], [' admin'], ['a"b'], ['caf\u00e9'], ['a\r\nX-Evil: 1'], [''], [null]]) {
      const res = await get('/headers/a', await env.issuer.sign({ groups }))
      expect(res.status, JSON.stringify(groups)).toBe(401)
      expect(res.headers.get('www-authenticate'), JSON.stringify(groups)).toContain('error="invalid_token"')
    }
    expect(env.upstream.requests).toHaveLength(0)
    expect(env.logs.filter((line) => line.includes('"reason":"unrepresentable_claim"'))).toHaveLength(9)
  })

  it('removes every mapped header from client requests on every route, auth: none included', async () => {
    const spoofed = { 'x-tenant': 'acme', 'x-roles': 'orders-admin', 'x-groups': 'admins', 'x-org-region': 'eu', 'x_tenant': 'acme' }
    expect((await get('/public/x', undefined, spoofed)).status).toBe(200)
    const headers = env.upstream.requests[0]!.headers
    for (const name of Object.keys(spoofed)) expect(headers[name], name).toBeUndefined()
  })
})

describe('permissions and claims from introspection', () => {
  it('reads realm roles from an RFC 7662 answer as permissions, and route conditions and headers from its claims', async () => {
    env.idp.answers.set('kc_reader', { json: {
      active: true, iss: OPAQUE_ISSUER, aud: 'orders-api', sub: 'u1', scope: 'orders:read', tenant: 'acme',
      realm_access: { roles: ['orders-reader'] }, exp: Math.floor(Date.now() / 1000) + 300,
    } })
    env.idp.answers.set('kc_admin', { json: {
      active: true, iss: OPAQUE_ISSUER, aud: 'orders-api', sub: 'u2', scope: 'profile', realm_access: { roles: ['orders-admin'] },
    } })
    const res = await get('/tenants/acme/orders/1', 'kc_reader')
    expect(res.status).toBe(200)
    expect(env.upstream.requests[0]!.headers['x-tenant']).toBe('acme')
    expect((await get('/role/x', 'kc_admin')).status).toBe(200)
    env.upstream.requests.length = 0
    const denied = await get('/role/x', 'kc_reader')
    expect(denied.status).toBe(403)
    expect(denied.headers.get('www-authenticate')).toContain('scope="orders-admin"')
    expect(env.upstream.requests).toHaveLength(0)
  })
})

describe('reload', () => {
  it('a changed condition applies to the next request, and the cached token is judged by the new rule', async () => {
    const token = await env.issuer.sign(READER)
    expect((await get('/tenants/acme/orders/7', token)).status).toBe(200)
    const next = structuredClone(env.config) as { routes: Array<Record<string, unknown>> }
    next.routes[0]!.claims = { all: [{ claim: 'tenant', equals: 'globex' }] }
    writeFileSync(env.file, stringify(next))
    expect(await env.running.reload()).toBe(true)
    env.upstream.requests.length = 0
    env.logs.length = 0
    await expectAccessDenied(await get('/tenants/acme/orders/7', token), 'claims.all[0]: tenant equals "globex"')
    writeFileSync(env.file, stringify(env.config))
    expect(await env.running.reload()).toBe(true)
    expect((await get('/tenants/acme/orders/7', token)).status).toBe(200)
  })
})

describe('reload, on one kept-alive connection', () => {
  // The connection keeps its last Bearer token with the cache key made of it (src/authn/bearer.ts, issue 24): a
  // reload with another issuer policy must judge the very same header under the new policy, and back again.
  it('judges the kept token by each issuer policy in turn: accepted, refused for its audience, accepted again', async () => {
    const token = await env.issuer.sign(READER)
    const connection = new Client(env.url)
    let connections = 0
    connection.on('connect', () => connections++)
    const call = async () => {
      const res = await connection.request({ path: '/tenants/acme/orders/7', method: 'GET', headers: { authorization: `Bearer ${token}` } })
      await res.body.dump()
      return res.statusCode
    }
    try {
      expect([await call(), await call()]).toEqual([200, 200])
      const next = structuredClone(env.config) as { issuers: Array<Record<string, unknown>> }
      next.issuers[0]!.audience = ['another-api']
      writeFileSync(env.file, stringify(next))
      expect(await env.running.reload()).toBe(true)
      env.upstream.requests.length = 0
      expect([await call(), await call()]).toEqual([401, 401])
      expect(env.upstream.requests).toHaveLength(0)
      writeFileSync(env.file, stringify(env.config))
      expect(await env.running.reload()).toBe(true)
      expect([await call(), await call()]).toEqual([200, 200])
      expect(env.upstream.requests).toHaveLength(2)
      expect(connections).toBe(1)
    } finally {
      await connection.close()
    }
  })
})

describe("the embedded server's tokens", () => {
  // Its opaque tokens are store rows, not claim sets: conditions and headers read the claims its JWTs carry.
  for (const format of ['opaque', 'jwt'] as const) {
    it(`${format} access tokens: conditions and claim headers read iss, sub, client_id and scope`, async (context) => {
      const svc = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
      const gateway = await startAuthServerGateway({
        access_token: { format, audience: ['orders-api'] },
        clients: [svc, { client_id: 'other', client_secret: 'other-secret-0123456789ab' }]
          .map((client) => ({ ...client, grant_types: ['client_credentials'], scopes: ['orders:read'] })),
      }, {
        routes: [{ id: 'api', path: '/api/**', upstream: 'echo',
          claims: { all: [{ claim: 'client_id', equals: 'svc' }, { claim: 'scope', contains: 'orders:read' }] },
          claim_headers: { 'X-Client': 'client_id' } }],
      })
      context.onTestFinished(() => gateway.close())
      const token = async (client: { client_id: string; client_secret: string }) => {
        const res = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'orders:read' }, { authorization: basic(client.client_id, client.client_secret) })
        expect(res.status).toBe(200)
        return res.body.access_token as string
      }
      const mine = await token(svc)
      expect(mine.startsWith('pat_')).toBe(format === 'opaque')
      const res = await fetch(`${gateway.url}/api/x`, { headers: { authorization: `Bearer ${mine}`, 'x-client': 'forged' } })
      expect(res.status).toBe(200)
      expect(((await res.json()) as { headers: Record<string, string> }).headers['x-client']).toBe('svc')
      const other = await fetch(`${gateway.url}/api/x`, { headers: { authorization: `Bearer ${await token({ client_id: 'other', client_secret: 'other-secret-0123456789ab' })}` } })
      expect(other.status).toBe(403)
      expect(await other.json()).toEqual({ error: 'access_denied', error_description: 'the access token does not permit this request' })
    })
  }
})
