/**
 * Issue 23 with the real proxies in front: Debian's nginx (auth_request) and Caddy (forward_auth), each run
 * from the example config the docs show (examples/decision/), with only addresses, ports and the secret
 * replaced. Portcullis decides through its decision endpoint; the proxy forwards to a recording upstream.
 * Every refusal is checked to have reached the client with its challenge, and not the upstream.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { basic, postForm } from '../support/authserver.js'
import { rawRequest, startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { CADDY, NGINX, startCaddy, startNginx, versionOf, type RunningProxy } from '../support/proxies.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const SECRET = 'decision-secret-for-the-proxies-0123456789'
const EXAMPLE_SECRET = 'change-me-to-decision-trust-secret-of-32+-chars'
const SERVICE = { client_id: 'billing', client_secret: 'billing-secret-0123456789' }

const ROUTES = [
  { id: 'orders-read', path: '/orders/**', methods: ['GET', 'HEAD'], upstream: 'main', scopes: { all: ['orders:read'] } },
  { id: 'orders-write', path: '/orders/**', methods: ['POST'], upstream: 'main', scopes: { all: ['orders:write'] } },
  { id: 'ws', path: '/ws', methods: ['GET'], upstream: 'main' },
  // A CORS-style anonymous OPTIONS beside it: an upgrade by OPTIONS must not ride on it.
  { id: 'ws-options', path: '/ws', methods: ['OPTIONS'], upstream: 'main', auth: 'none' },
  { id: 'public', path: '/public/**', upstream: 'main', auth: 'none' },
  { id: 'limited', path: '/limited/**', upstream: 'main', rate_limits: ['two'] },
  { id: 'mcp', path: '/mcp', upstream: 'main', scopes: { all: ['orders:read'] }, mcp: { tools: { delete_order: { scopes: { all: ['orders:write'] } } } } },
]

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway & { issuer: string }
let decisionAddress: string

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startAuthServerGateway({
    clients: [{ ...SERVICE, token_endpoint_auth_method: 'client_secret_basic', grant_types: ['client_credentials'], scopes: ['orders:read'] }],
  }, {
    upstreams: { main: { url: upstream.url } },
    issuers: [{ issuer: issuer.issuer, jwks_uri: issuer.jwksUri, audience: [issuer.audience], algorithms: ['ES256'] }],
    routes: ROUTES,
    decision: { listen: '127.0.0.1:0', trust: { addresses: ['127.0.0.1/32'], secret: SECRET } },
    rate_limits: { policies: { two: { limit: 2, window: '1m', key: 'sub' } } },
  })
  decisionAddress = new URL(gateway.decisionUrl!).host
})
afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

/** An example config with this test's addresses, ports and secret. */
function example(file: string, replacements: Array<[string, string]>): string {
  let text = readFileSync(new URL(`../../examples/decision/${file}`, import.meta.url), 'utf8')
  for (const [from, to] of [['127.0.0.1:8181', decisionAddress], ['127.0.0.1:9001', new URL(upstream.url).host], [EXAMPLE_SECRET, SECRET],
    ...replacements] as Array<[string, string]>) {
    if (!text.includes(from)) throw new Error(`examples/decision/${file} no longer contains ${from}`)
    text = text.replaceAll(from, to)
  }
  return text
}

const token = (claims: Record<string, unknown> = {}) => issuer.sign({ scope: 'orders:read', ...claims })

/** The checks both proxies must pass; `proxy()` is the running one. */
function commonChecks(proxy: () => RunningProxy) {
  it('forwards an allowed request with the identity headers set from the token, a client\'s copies replaced', async () => {
    const before = upstream.requests.length
    const response = await fetch(`${proxy().url}/orders/1?page=2`, {
      headers: { authorization: `Bearer ${await token()}`, 'x-auth-subject': 'admin', 'x-auth-scopes': 'orders:write' },
    })
    expect(response.status).toBe(200)
    const seen = upstream.requests.slice(before)
    expect(seen).toHaveLength(1)
    expect(seen[0]).toMatchObject({ method: 'GET', url: '/orders/1?page=2' })
    expect(seen[0]!.headers['x-auth-subject']).toBe('user-1')
    expect(seen[0]!.headers['x-auth-scopes']).toBe('orders:read')
    expect(seen[0]!.headers['x-auth-issuer']).toBe(issuer.issuer)
  })

  it('strips what the proxy mode strips: method and URL overrides, underscore spellings of identity headers', async () => {
    const before = upstream.requests.length
    const response = await fetch(`${proxy().url}/orders/3`, {
      headers: {
        authorization: `Bearer ${await token()}`, 'x-http-method-override': 'DELETE', 'x-method-override': 'DELETE',
        'x-original-url': '/admin', 'x-rewrite-url': '/admin', x_auth_subject: 'admin', x_auth_scopes: 'orders:write',
      },
    })
    expect(response.status).toBe(200)
    const seen = upstream.requests.slice(before)[0]!.headers
    for (const name of ['x-http-method-override', 'x-method-override', 'x-original-url', 'x-rewrite-url', 'x_auth_subject', 'x_auth_scopes']) {
      expect(seen[name], name).toBeUndefined()
    }
  })

  it('passes the route\'s RateLimit fields to the client on an allowed answer and on the 429, with Retry-After', async () => {
    const authorization = `Bearer ${await token({ sub: `limited-${proxy().url}` })}`
    const before = upstream.requests.length
    for (let i = 0; i < 2; i++) {
      const allowed = await fetch(`${proxy().url}/limited/x`, { headers: { authorization } })
      expect(allowed.status).toBe(200)
      expect(allowed.headers.get('ratelimit-policy')).toMatch(/^"two";q=2;w=60/)
      expect(allowed.headers.get('ratelimit')).toMatch(new RegExp(`^"two";r=${1 - i};t=\\d+`))
    }
    const limited = await fetch(`${proxy().url}/limited/x`, { headers: { authorization } })
    expect(limited.status).toBe(429)
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expect(limited.headers.get('ratelimit')).toMatch(/^"two";r=0;t=\d+/)
    expect(limited.headers.get('ratelimit-policy')).toMatch(/^"two";q=2;w=60/)
    expect(upstream.requests.length).toBe(before + 2)
    // The client's token goes on, as in the proxy mode (forward.strip_authorization defaults to false); the decision's
    // fields do not, and a route without limits answers none (not an empty one, nor a client's own copy).
    expect(upstream.requests.at(-1)!.headers.authorization).toBe(authorization)
    expect(upstream.requests.at(-1)!.headers.ratelimit).toBeUndefined()
    const unlimited = await fetch(`${proxy().url}/orders/5`, { headers: { authorization, ratelimit: '"two";r=99;t=1' } })
    expect(unlimited.status).toBe(200)
    expect(unlimited.headers.get('ratelimit')).toBeNull()
    expect(unlimited.headers.get('ratelimit-policy')).toBeNull()
  })

  it('a token without a subject: the client\'s X-Auth-Subject does not reach the upstream', async () => {
    const before = upstream.requests.length
    const response = await fetch(`${proxy().url}/orders/2`, {
      headers: { authorization: `Bearer ${await token({ sub: undefined })}`, 'x-auth-subject': 'admin' },
    })
    expect(response.status).toBe(200)
    const value = upstream.requests.slice(before)[0]!.headers['x-auth-subject']
    expect(value === undefined || value === '', String(value)).toBe(true)
  })

  it('401 with the proxy mode\'s challenge reaches the client; the upstream gets nothing', async () => {
    const before = upstream.requests.length
    const none = await fetch(`${proxy().url}/orders/1`)
    expect(none.status).toBe(401)
    const direct = await fetch(`${gateway.url}/orders/1`)
    expect(none.headers.get('www-authenticate')).toBe(direct.headers.get('www-authenticate'))
    const bad = await fetch(`${proxy().url}/orders/1`, { headers: { authorization: 'Bearer forged.token.value' } })
    expect(bad.status).toBe(401)
    expect(bad.headers.get('www-authenticate')).toMatch(/^Bearer realm="portcullis", error="invalid_token"/)
    expect(upstream.requests.length).toBe(before)
  })

  it('403 insufficient_scope with its challenge; the upstream gets nothing', async () => {
    const before = upstream.requests.length
    const response = await fetch(`${proxy().url}/orders/1`, { method: 'POST', headers: { authorization: `Bearer ${await token()}` }, body: 'x' })
    expect(response.status).toBe(403)
    const direct = await fetch(`${gateway.url}/orders/1`, { method: 'POST', headers: { authorization: `Bearer ${await token()}` }, body: 'x' })
    expect(direct.status).toBe(403)
    expect(response.headers.get('www-authenticate')).toBe(direct.headers.get('www-authenticate'))
    expect(response.headers.get('www-authenticate')).toContain('error="insufficient_scope"')
    expect(upstream.requests.length).toBe(before)
  })

  it('an MCP message is decided from its Mcp-Method and Mcp-Name headers: the allowed one forwarded with its body, a tool short of scope 403, no headers 400 saying what to do', async () => {
    const message = (name: string) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } })
    const post = async (scope: string, name: string | undefined) => fetch(`${proxy().url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${await token({ scope })}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream',
        ...(name !== undefined && { 'mcp-method': 'tools/call', 'mcp-name': name }),
      },
      body: message(name ?? 'delete_order'),
    })
    const before = upstream.requests.length
    const allowed = await post('orders:read orders:write', 'delete_order')
    expect(allowed.status).toBe(200)
    expect(upstream.requests.length).toBe(before + 1)
    expect(upstream.requests.at(-1)).toMatchObject({ method: 'POST', url: '/mcp' })
    expect(upstream.requests.at(-1)!.headers['mcp-name']).toBe('delete_order')
    const short = await post('orders:read', 'delete_order')
    expect(short.status).toBe(403)
    expect(short.headers.get('www-authenticate')).toContain('scope="orders:read orders:write"')
    const old = await post('orders:read orders:write', undefined)
    expect(old.status).toBe(400)
    expect(old.headers.get('www-authenticate')).toMatch(/error="invalid_request", error_description="an MCP message is decided here from its Mcp-Method and Mcp-Name headers .*serve this route through the proxy mode"/)
    expect(upstream.requests.length).toBe(before + 1)
  })

  it('a path no route matches is 404 and a path trick 400; the upstream gets nothing', async () => {
    const before = upstream.requests.length
    const authorization = `Bearer ${await token()}`
    expect((await fetch(`${proxy().url}/admin`, { headers: { authorization } })).status).toBe(404)
    const trick = await fetch(`${proxy().url}/orders/%2e%2e/admin`, { headers: { authorization } })
    expect([400, 404]).toContain(trick.status)
    expect(upstream.requests.length).toBe(before)
  })
}

describe.skipIf(NGINX === undefined)(`nginx auth_request (${versionOf(NGINX, ['-v'])}; skipped when /usr/sbin/nginx is absent: apt-get install nginx-light)`, () => {
  let nginx: RunningProxy
  beforeAll(async () => {
    nginx = await startNginx(example('nginx.conf', [
      ['listen 80;', 'listen 127.0.0.1:{PORT};'],
      ['/var/lib/nginx/portcullis', '{DIR}/cache'],
      // For the test only: whether nginx answered the decision from its cache.
      ['auth_request /_portcullis;', 'auth_request /_portcullis;\n        auth_request_set $portcullis_cache $upstream_cache_status;\n        add_header X-Decision-Cache $portcullis_cache always;'],
    ]))
  })
  afterAll(() => nginx?.close())

  commonChecks(() => nginx)

  // nginx -t opens the stock config's log and pid files and creates the cache directory: as root, where Debian put them.
  const stockSkipped = process.getuid?.() !== 0 ? 'needs root, as nginx does'
    : existsSync('/etc/nginx/nginx.conf') ? undefined : "Debian's /etc/nginx/nginx.conf is absent"
  it.skipIf(stockSkipped !== undefined)(
    `the example as shipped passes nginx -t inside Debian's stock nginx.conf, beside its default site${stockSkipped ? ` (skipped: ${stockSkipped})` : ''}`, () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-nginx-stock-'))
      const example = path.join(dir, 'portcullis.conf')
      writeFileSync(example, readFileSync(new URL('../../examples/decision/nginx.conf', import.meta.url), 'utf8'))
      const stock = readFileSync('/etc/nginx/nginx.conf', 'utf8')
      // Where the header says to put it: Debian's http block includes conf.d/*.conf (and sites-enabled/*).
      expect(stock).toContain('include /etc/nginx/conf.d/*.conf;')
      const main = path.join(dir, 'nginx.conf')
      writeFileSync(main, stock.replace('include /etc/nginx/conf.d/*.conf;', `include ${example};`))
      const result = spawnSync(NGINX!, ['-t', '-c', main], { encoding: 'utf8' })
      expect(result.status, result.stderr).toBe(0)
      expect(result.stderr).not.toMatch(/conflicting server name|duplicate default server/)
    })

  it('maps the other refusals back from nginx\'s 500: 405 with Allow', async () => {
    const response = await fetch(`${nginx.url}/orders/1`, { method: 'DELETE', headers: { authorization: `Bearer ${await token()}` } })
    expect(response.status).toBe(405)
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST')
  })

  it('caches allowed decisions, and a revoked token is refused within 1 s', async () => {
    const issued = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'orders:read' },
      { authorization: basic(SERVICE.client_id, SERVICE.client_secret) })
    expect(issued.status).toBe(200)
    const accessToken = issued.body.access_token as string
    const call = () => fetch(`${nginx.url}/orders/cached`, { headers: { authorization: `Bearer ${accessToken}` } })
    const first = await call()
    expect(first.status).toBe(200)
    expect(first.headers.get('x-decision-cache')).toBe('MISS')
    const second = await call()
    expect(second.status).toBe(200)
    expect(second.headers.get('x-decision-cache')).toBe('HIT')
    const revoked = await postForm(gateway, '/revoke', { token: accessToken }, { authorization: basic(SERVICE.client_id, SERVICE.client_secret) })
    expect(revoked.status).toBe(200)
    const revokedAt = Date.now()
    // Until the cached decision expires (at most decision.cache_ttl, 1 s) nginx may still answer from it; then never.
    let status = 200
    while (status === 200 && Date.now() - revokedAt < 3000) {
      status = (await call()).status
      if (status === 200) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(status).toBe(401)
    expect(Date.now() - revokedAt).toBeLessThan(1200)
    const after = await call()
    expect(after.status).toBe(401)
    expect(after.headers.get('www-authenticate')).toContain('error="invalid_token"')
  })

  it('keys the decision cache one way only: a credential cannot pose as another method and URI', async () => {
    const before = upstream.requests.length
    // With the key "$http_authorization|$request_method|$request_uri" these two requests had one key, and the
    // anonymous GET's cached allow let the DELETE through.
    const primed = await fetch(`${nginx.url}/public/x?|DELETE|/orders/1`)
    expect(primed.status).toBe(200)
    expect(upstream.requests.length).toBe(before + 1)
    const attack = await fetch(`${nginx.url}/orders/1`, { method: 'DELETE', headers: { authorization: '|GET|/public/x?' } })
    expect(attack.headers.get('x-decision-cache')).not.toBe('HIT')
    expect(attack.status).toBe(405)
    expect(upstream.requests.length).toBe(before + 1)
  })

  it('an upgrade by another method than GET is refused by the decision, not forwarded', async () => {
    const upgrades = upstream.upgrades.length
    const response = await rawRequest(nginx.port, ['OPTIONS /ws HTTP/1.1', 'Host: x', 'Upgrade: websocket', 'Connection: Upgrade',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version: 13', '', ''].join('\r\n'))
    expect(response.status).toBe(400)
    // The body of the example's refusal location: the decision said 400 (the upstream never saw it).
    expect(response.body.trim()).toBe('{"error":"invalid_request"}')
    expect(upstream.upgrades.length).toBe(upgrades)
  })

  it('never caches a refusal: the same request is decided again', async () => {
    const response = await fetch(`${nginx.url}/orders/uncached`)
    expect(response.status).toBe(401)
    const again = await fetch(`${nginx.url}/orders/uncached`)
    expect(again.headers.get('x-decision-cache')).not.toBe('HIT')
  })

  it('carries a WebSocket through nginx after the decision; refused without a token', async () => {
    const url = `${nginx.url.replace(/^http/, 'ws')}/ws`
    const authorization = `Bearer ${await token()}`
    const hello = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const ws = new WebSocket(url, { headers: { authorization } })
      ws.once('message', (data) => { ws.terminate(); resolve(JSON.parse(String(data)) as Record<string, unknown>) })
      ws.once('unexpected-response', (_req, res) => reject(new Error(`unexpected ${res.statusCode}`)))
      ws.once('error', reject)
    })
    expect(hello).toEqual({ hello: true, subject: 'user-1' })
    const upgrades = upstream.upgrades.length
    const status = await new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(url)
      ws.once('open', () => { ws.terminate(); reject(new Error('the upgrade was accepted')) })
      ws.once('error', () => { /* reported through unexpected-response */ })
      ws.once('unexpected-response', (_req, res) => { res.resume(); ws.terminate(); resolve(res.statusCode!) })
    })
    expect(status).toBe(401)
    expect(upstream.upgrades.length).toBe(upgrades)
  })
})

describe.skipIf(CADDY === undefined)(`Caddy forward_auth (${versionOf(CADDY, ['version'])}; skipped when /usr/bin/caddy is absent: apt-get install caddy)`, () => {
  let caddy: RunningProxy
  beforeAll(async () => {
    caddy = await startCaddy(example('Caddyfile', [[':80 {', 'http://127.0.0.1:{PORT} {']]))
  })
  afterAll(() => caddy?.close())

  commonChecks(() => caddy)

  it('passes every refusal as Portcullis wrote it: status, headers and JSON body', async () => {
    const response = await fetch(`${caddy.url}/orders/1`, { method: 'DELETE', headers: { authorization: `Bearer ${await token()}` } })
    expect(response.status).toBe(405)
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST')
    expect(await response.json()).toMatchObject({ error: 'method_not_allowed' })
  })

  it('a client\'s X-Original-* headers cannot redescribe the request: refused', async () => {
    const before = upstream.requests.length
    const response = await fetch(`${caddy.url}/admin`, { headers: { 'x-original-uri': '/orders/1', 'x-original-method': 'GET', authorization: `Bearer ${await token()}` } })
    expect(response.status).toBe(404)
    expect(upstream.requests.length).toBe(before)
  })
})
