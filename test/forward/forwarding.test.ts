/**
 * Forwarding (issue 2, point 8): what the upstream receives, what the client gets back, and the limits
 * and failures on the way. Every rejection also proves the upstream was never reached.
 */
import { createHash, randomBytes } from 'node:crypto'
import http from 'node:http'
import { createRequire } from 'node:module'
import net from 'node:net'
import v8 from 'node:v8'
import vm from 'node:vm'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it, type TestContext } from 'vitest'
import { closedPort, startRecordingUpstream, type RecordingUpstream, type UpstreamOptions } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

type ConfigParts = Omit<Parameters<typeof testConfig>[0], 'upstream' | 'issuer'> & { upstreamUrl?: string }

interface Setup {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  bearer(claims?: Record<string, unknown>): Promise<string>
}

async function setup(onTestFinished: TestContext['onTestFinished'], parts: ConfigParts = {},
  upstreamOptions: UpstreamOptions = {}): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(upstreamOptions), startTestIssuer()])
  const { upstreamUrl, ...rest } = parts
  const gateway = await startGateway(testConfig({ upstream: { url: upstreamUrl ?? upstream.url }, issuer, ...rest }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return {
    upstream, issuer, gateway,
    bearer: async (claims = {}) => `Bearer ${await issuer.sign({ scope: 'orders:read', ...claims })}`,
  }
}

interface Answer {
  status: number
  headers: http.IncomingHttpHeaders
  body: string
}

/**
 * node:http rather than fetch: it sends what fetch refuses (Connection, TE, Upgrade, Keep-Alive) and
 * reads a response the server sends before it has read the whole body.
 */
function send(url: string, options: { method?: string; headers?: http.OutgoingHttpHeaders; body?: Buffer | string | Readable } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method ?? 'GET', headers: options.headers, agent: false })
    let answered = false
    req.on('response', (res) => {
      answered = true
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    // The gateway may answer (413) and close before the body is sent: that write error is expected.
    req.on('error', (error) => { if (!answered) reject(error) })
    const body = options.body
    if (body instanceof Readable) {
      body.on('error', () => req.destroy())
      body.pipe(req)
    } else {
      req.end(body)
    }
  })
}

function json(answer: Answer): Record<string, unknown> {
  expect(answer.headers['content-type']).toMatch(/^application\/json/)
  return JSON.parse(answer.body) as Record<string, unknown>
}

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex')

/** `total` bytes of varied data in 64 KiB chunks, made as they are read; `digest()` once it has ended. */
function generatedBody(total: number, onChunk?: (sent: number) => void, chunkSize = 64 * 1024): { stream: Readable; digest(): string } {
  const hash = createHash('sha256')
  const block = randomBytes(chunkSize)
  let sent = 0
  const stream = new Readable({
    read() {
      if (sent >= total) { this.push(null); return }
      const size = Math.min(chunkSize, total - sent)
      const chunk = Buffer.allocUnsafe(size)
      block.copy(chunk, 0, 0, size)
      chunk.writeUInt32BE(sent / chunkSize, 0)  // no two chunks alike, so reordering would show
      sent += size
      hash.update(chunk)
      onChunk?.(sent)
      this.push(chunk)
    },
  })
  return { stream, digest: () => hash.digest('hex') }
}

/** A chunked body that sends `first`, waits, then keeps sending until `total` bytes or the socket dies. */
function slowChunked(first: number, total: number, pauseMs = 100): Readable {
  let sent = 0
  return new Readable({
    async read() {
      if (sent >= total) { this.push(null); return }
      if (sent === first) await sleep(pauseMs)
      const size = sent < first ? first : Math.min(16 * 1024, total - sent)
      sent += size
      this.push(Buffer.alloc(size, 0x61))
    },
  })
}

describe('forwarding: what the upstream receives', () => {
  it('forwards method, path, query, headers and body unchanged', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const body = JSON.stringify({ item: 'widget', qty: 3 })
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD']) {
      const target = `/orders/42/items/%E2%9C%93/a:b@c?b=2&a=1&a=%20x&empty=&flag&enc=%2F%3F%26`
      const withBody = method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS'
      const res = await send(`${gateway.url}${target}`, {
        method,
        headers: {
          authorization: await bearer(),
          'x-request-id': `req-${method}`,
          accept: 'application/json',
          'x-multi': ['one', 'two'],
          ...(withBody && { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }),
        },
        ...(withBody && { body }),
      })
      expect(res.status).toBe(200)
      const seen = upstream.requests.at(-1)!
      expect(seen.method).toBe(method)
      expect(seen.url).toBe(target)
      expect(seen.headers['x-request-id']).toBe(`req-${method}`)
      expect(seen.headers.accept).toBe('application/json')
      expect(seen.headers['x-multi']).toBe('one, two')
      if (withBody) {
        expect(seen.headers['content-type']).toBe('application/json')
        expect(seen.bodySha256).toBe(sha256(body))
      } else {
        expect(seen.bodyBytes).toBe(0)
      }
    }
    expect(upstream.requests).toHaveLength(7)
  })

  it('passes header values with non-ASCII bytes through byte for byte', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const head = Buffer.concat([
      Buffer.from(`GET /orders HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nAuthorization: ${await bearer()}\r\nX-Name: zo`),
      Buffer.from([0xeb, 0xff]),
      Buffer.from('\r\n\r\n'),
    ])
    const socket = net.connect(gateway.port, '127.0.0.1', () => socket.write(head))
    socket.resume()
    await new Promise((resolve) => socket.on('end', resolve))
    expect(Buffer.from(upstream.requests[0]!.headers['x-name'] as string, 'latin1')).toEqual(Buffer.from([0x7a, 0x6f, 0xeb, 0xff]))
  })

  it('passes a 6 KB query string through byte for byte', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const query = '?' + Array.from({ length: 400 }, (_, i) => `k${i}=${randomBytes(4).toString('hex')}%20%2B`).join('&')
    expect(query.length).toBeGreaterThan(6000)
    const res = await send(`${gateway.url}/search${query}`, { headers: { authorization: await bearer() } })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.url).toBe(`/search${query}`)
  })

  it('replaces client-sent X-Forwarded-* and Forwarded with what the gateway saw', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, {
      headers: {
        authorization: await bearer(),
        'x-forwarded-for': '203.0.113.9',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'evil.example',
        forwarded: 'for=203.0.113.9;proto=https',
      },
    })
    expect(res.status).toBe(200)
    const headers = upstream.requests[0]!.headers
    expect(headers['x-forwarded-for']).toBe('127.0.0.1')
    expect(headers['x-forwarded-proto']).toBe('http')
    expect(headers['x-forwarded-host']).toBe(`127.0.0.1:${gateway.port}`)
    expect(headers.forwarded).toBeUndefined()
  })

  it('sets X-Forwarded-* when the client sent none', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(), host: 'api.example:8443' } })
    expect(upstream.requests[0]!.headers).toMatchObject({
      'x-forwarded-for': '127.0.0.1', 'x-forwarded-proto': 'http', 'x-forwarded-host': 'api.example:8443',
    })
  })

  it('appends to a client X-Forwarded-For and keeps the first hop\'s proto and host with trust_forwarded_headers', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { forward: { trust_forwarded_headers: true } })
    const res = await send(`${gateway.url}/orders`, {
      headers: {
        authorization: await bearer(),
        'x-forwarded-for': '203.0.113.9, 10.0.0.2',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'api.example',
      },
    })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers).toMatchObject({
      'x-forwarded-for': '203.0.113.9, 10.0.0.2, 127.0.0.1', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'api.example',
    })
  })

  it('sends each forwarding header once with trust_forwarded_headers: the hop\'s own where the client\'s is missing or Connection-listed', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { forward: { trust_forwarded_headers: true } })
    const res = await send(`${gateway.url}/orders`, {
      headers: { authorization: await bearer(), connection: 'keep-alive, X-Forwarded-Proto', 'x-forwarded-proto': 'https', 'x-real-ip': '198.51.100.7' },
    })
    expect(res.status).toBe(200)
    const seen = upstream.requests[0]!
    expect(seen.headers).toMatchObject({ 'x-forwarded-for': '127.0.0.1', 'x-forwarded-proto': 'http', 'x-real-ip': '198.51.100.7' })
    expect(seen.headers['x-forwarded-port']).toMatch(/^\d+$/)
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
    for (const name of ['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'x-auth-subject']) {
      expect(names.filter((found) => found === name), name).toHaveLength(1)
    }
  })

  it('forwards a request header the client sent as several fields (Set-Cookie) as those fields', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(), 'set-cookie': ['a=1', 'b=2'], cookie: 'c=3' } })
    expect(res.status).toBe(200)
    const seen = upstream.requests[0]!
    expect(seen.headers['set-cookie']).toEqual(['a=1', 'b=2'])
    expect(seen.headers.cookie).toBe('c=3')
  })

  it('drops hop-by-hop request headers, including every header named in Connection', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, {
      headers: {
        authorization: await bearer(),
        connection: 'keep-alive, X-Drop-Me, x-also-dropped',
        'keep-alive': 'timeout=5, max=100',
        te: 'trailers',
        upgrade: 'h2c',  // without `Connection: upgrade` this is an ordinary request carrying the header
        'proxy-authorization': 'Basic cHJveHk6c2VjcmV0',
        'proxy-connection': 'keep-alive',
        'x-drop-me': 'hop',
        'x-also-dropped': 'hop',
        'x-kept': 'end-to-end',
      },
    })
    expect(res.status).toBe(200)
    const headers = upstream.requests[0]!.headers
    for (const name of ['keep-alive', 'te', 'upgrade', 'proxy-authorization', 'proxy-connection', 'x-drop-me', 'x-also-dropped']) {
      expect(headers, name).not.toHaveProperty(name)
    }
    // The gateway's own connection to the upstream is keep-alive; nothing of the client's Connection list survives.
    expect(headers.connection ?? 'keep-alive').toBe('keep-alive')
    expect(headers['x-kept']).toBe('end-to-end')
    expect(headers.authorization).toMatch(/^Bearer /)
  })

  it('answers Expect: 100-continue itself and forwards the body without the expectation', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const body = randomBytes(8192)
    const authorization = await bearer()
    const res = await new Promise<Answer>((resolve, reject) => {
      const req = http.request(`${gateway.url}/upload`, {
        method: 'PUT', agent: false, headers: { authorization, expect: '100-continue', 'content-length': body.length },
      })
      req.on('continue', () => req.end(body))
      req.on('response', (response) => {
        let text = ''
        response.on('data', (chunk: Buffer) => { text += chunk.toString() })
        response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body: text }))
      })
      req.on('error', reject)
    })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers.expect).toBeUndefined()
    expect(upstream.requests[0]!.bodySha256).toBe(sha256(body))
  })

  it('drops hop-by-hop response headers, including every header the upstream names in Connection', async ({ onTestFinished }) => {
    const { gateway, bearer } = await setup(onTestFinished, {}, {
      responseHeaders: {
        connection: 'keep-alive, X-Upstream-Private, x-other-private',
        'keep-alive': 'timeout=5',
        'x-other-private': 'hop',
        te: 'trailers',
        upgrade: 'h2c',
        'proxy-authenticate': 'Basic realm="upstream-proxy"',
        'proxy-authorization': 'Basic dXBzdHJlYW0=',
        'x-end-to-end': 'kept',
      },
    })
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer() } })
    expect(res.status).toBe(200)
    for (const name of ['keep-alive', 'te', 'upgrade', 'proxy-authenticate', 'proxy-authorization', 'x-upstream-private', 'x-other-private']) {
      expect(res.headers, name).not.toHaveProperty(name)
    }
    expect(res.headers['x-end-to-end']).toBe('kept')
    expect(res.headers['set-cookie']).toEqual(['a=1', 'b=2'])
    expect(JSON.parse(res.body)).toMatchObject({ ok: true, url: '/orders' })
  })
})

describe('forwarding: identity headers', () => {
  const spoofed = {
    'x-auth-subject': 'admin',
    'x-auth-client-id': 'trusted-backend',
    'x-auth-scopes': 'orders:admin',
    'x-auth-issuer': 'https://evil.example/',
  }

  it('replaces spoofed identity headers with the token\'s on a protected route', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, {
      headers: { authorization: await bearer({ scope: 'orders:read orders:write' }), ...spoofed, 'X-AUTH-SUBJECT': 'ADMIN' },
    })
    expect(res.status).toBe(200)
    const seen = upstream.requests[0]!
    expect(seen.headers).toMatchObject({
      'x-auth-subject': 'user-1',
      'x-auth-client-id': 'client-1',
      'x-auth-scopes': 'orders:read orders:write',
      'x-auth-issuer': issuer.issuer,
    })
    // One value each: the client's never travels alongside ours.
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
    for (const name of Object.keys(spoofed)) expect(names.filter((n) => n === name)).toHaveLength(1)
  })

  it('removes spoofed identity headers sent twice or with underscores for dashes', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, {
      routes: [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' },
        { id: 'all', path: '/**', upstream: 'main', auth: 'required' }],
    })
    const token = (await bearer()).slice('Bearer '.length)
    for (const path of ['/public/page', '/orders']) {
      const raw = await rawRequest(gateway.port, `GET ${path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n` +
        `Authorization: Bearer ${token}\r\n` +
        'X-Auth-Subject: admin\r\nx-auth-subject: root\r\n' +
        'X_Auth_Subject: admin\r\nx_auth_scopes: orders:admin\r\nX-Auth_Client-Id: trusted\r\n' +
        'X_Forwarded_For: 203.0.113.9\r\n\r\n')
      expect(raw.status, path).toBe(200)
    }
    const [publicSeen, protectedSeen] = upstream.requests
    for (const seen of [publicSeen!, protectedSeen!]) {
      const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
      expect(names.filter((name) => name.replace(/_/g, '-').startsWith('x-auth-'))
        .every((name) => !name.includes('_'))).toBe(true)
      expect(names).not.toContain('x_forwarded_for')
    }
    expect(publicSeen!.headers['x-auth-subject']).toBeUndefined()
    expect(protectedSeen!.headers['x-auth-subject']).toBe('user-1')
    expect(protectedSeen!.headers['x-auth-scopes']).toBe('orders:read')
  })

  it('never forwards identity headers smuggled in as chunked trailers', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const raw = await rawRequest(gateway.port, `POST /orders HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n` +
      `Authorization: ${await bearer()}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Auth-Subject\r\n\r\n` +
      '5\r\nhello\r\n0\r\nX-Auth-Subject: admin\r\nX-Auth-Scopes: orders:admin\r\n\r\n')
    expect(raw.status).toBe(200)
    const seen = upstream.requests[0]!
    expect(seen.bodyBytes).toBe(5)
    expect(seen.headers['x-auth-subject']).toBe('user-1')
    expect(seen.headers['x-auth-scopes']).toBe('orders:read')
    expect(seen.headers.trailer).toBeUndefined()
  })

  it('refuses a request with both Content-Length and Transfer-Encoding (request smuggling) before forwarding', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const raw = await rawRequest(gateway.port, `POST /orders HTTP/1.1\r\nHost: gw\r\nAuthorization: ${await bearer()}\r\n` +
      'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /orders HTTP/1.1\r\nHost: gw\r\n\r\n')
    expect(raw.status).toBe(400)
    expect(JSON.parse(raw.body)).toMatchObject({ error: 'invalid_request' })
    expect(raw.raw.match(/HTTP\/1\.1 \d{3}/g)).toHaveLength(1)
    expect(upstream.requests).toHaveLength(0)
  })

  it('removes spoofed identity headers on an auth: none route', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, {
      routes: [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' }],
    })
    const res = await send(`${gateway.url}/public/page`, { headers: spoofed })
    expect(res.status).toBe(200)
    for (const name of Object.keys(spoofed)) expect(upstream.requests[0]!.headers, name).not.toHaveProperty(name)
  })

  it('removes spoofed identity headers on an auth: optional route without a token, and sets them with one', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, {
      routes: [{ id: 'maybe', path: '/maybe/**', upstream: 'main', auth: 'optional' }],
    })
    expect((await send(`${gateway.url}/maybe/a`, { headers: spoofed })).status).toBe(200)
    expect((await send(`${gateway.url}/maybe/b`, { headers: { ...spoofed, authorization: await bearer() } })).status).toBe(200)
    const [anonymous, identified] = upstream.requests
    for (const name of Object.keys(spoofed)) expect(anonymous!.headers, name).not.toHaveProperty(name)
    expect(identified!.headers['x-auth-subject']).toBe('user-1')
    expect(identified!.headers['x-auth-scopes']).toBe('orders:read')
  })

  it('uses the names from forward.identity_headers, and strips those on every route', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway, bearer } = await setup(onTestFinished, {
      forward: { identity_headers: { subject: 'X-User', client_id: 'X-Client', scopes: 'X-Scopes', issuer: 'X-Iss' } },
      routes: [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' },
        { id: 'all', path: '/**', upstream: 'main', auth: 'required' }],
    })
    const custom = { 'x-user': 'admin', 'x-client': 'trusted', 'x-scopes': 'everything', 'x-iss': 'evil', 'x-user-agent-ok': 'kept' }
    expect((await send(`${gateway.url}/public/x`, { headers: custom })).status).toBe(200)
    expect((await send(`${gateway.url}/orders`, { headers: { ...custom, authorization: await bearer() } })).status).toBe(200)
    const [publicSeen, protectedSeen] = upstream.requests
    for (const name of ['x-user', 'x-client', 'x-scopes', 'x-iss']) expect(publicSeen!.headers, name).not.toHaveProperty(name)
    expect(publicSeen!.headers['x-user-agent-ok']).toBe('kept')
    expect(protectedSeen!.headers).toMatchObject({ 'x-user': 'user-1', 'x-client': 'client-1', 'x-scopes': 'orders:read', 'x-iss': issuer.issuer })
    // Issue 24: the configured names are entered in undici's table of known names (src/forward/known-names.ts), lower-cased.
    const known = (createRequire(import.meta.url)('undici/lib/core/constants.js') as { headerNameLowerCasedRecord: Record<string, string> })
      .headerNameLowerCasedRecord
    for (const name of ['x-user', 'x-client', 'x-scopes', 'x-iss', 'x-forwarded-port', 'x-real-ip']) expect(known[name], name).toBe(name)
    expect(known['X-User']).toBeUndefined()
  })

  it('forwards the Authorization header by default and never with strip_authorization: true', async ({ onTestFinished }) => {
    const kept = await setup(onTestFinished)
    const stripped = await setup(onTestFinished, { forward: { strip_authorization: true } })
    const keptToken = await kept.bearer()
    expect((await send(`${kept.gateway.url}/orders`, { headers: { authorization: keptToken } })).status).toBe(200)
    expect(kept.upstream.requests[0]!.headers.authorization).toBe(keptToken)
    expect((await send(`${stripped.gateway.url}/orders`, { headers: { authorization: await stripped.bearer() } })).status).toBe(200)
    const seen = stripped.upstream.requests[0]!
    expect(seen.headers.authorization).toBeUndefined()
    expect(seen.rawHeaders.map((name) => name.toLowerCase())).not.toContain('authorization')
    expect(seen.headers['x-auth-subject']).toBe('user-1')
  })

  it.for([
    ['a CR/LF in sub', { sub: 'a\r\nX-Evil: 1' }],
    ['a bare LF in sub', { sub: 'a\nX-Evil: 1' }],
    ['a NUL in client_id', { client_id: 'client\u0000x' }],
    ['non-ASCII in sub', { sub: 'zoë' }],
    ['a CR/LF inside a scope', { scope: 'orders:read x\r\nX-Evil:1' }],
  ] as const)('refuses a token with %s as invalid_token, never splitting a header', async ([, claims], { onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(claims) } })
    expect(res.status).toBe(401)
    expect(res.headers['www-authenticate']).toContain('error="invalid_token"')
    expect(res.headers['x-evil']).toBeUndefined()
    expect(json(res)).toMatchObject({ error: 'invalid_token' })
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('forwarding: responses', () => {
  /** An upstream whose handler is the test's own; closed when the test ends. */
  async function customUpstream(onTestFinished: TestContext['onTestFinished'], handler: http.RequestListener): Promise<string> {
    const server = http.createServer(handler)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => { server.closeAllConnections(); return new Promise<void>((resolve) => server.close(() => resolve())) })
    return `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`
  }

  function get(url: string, authorization: string): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      http.get(url, { agent: false, headers: { authorization } }, resolve).on('error', reject)
    })
  }

  it('relays a large response as it streams, and holds the upstream back while the client does not read', { timeout: 30_000 }, async ({ onTestFinished }) => {
    const total = 96 * 1024 * 1024
    const block = randomBytes(1024 * 1024)
    const upstreamHash = createHash('sha256')
    let written = 0
    const url = await customUpstream(onTestFinished, (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total })
      const more = () => {
        while (written < total) {
          const next = Buffer.from(block)
          next.writeUInt32BE(written / block.length, 0)
          written += next.length
          upstreamHash.update(next)
          if (!res.write(next)) { res.once('drain', more); return }
        }
        res.end()
      }
      more()
    })
    const { gateway, bearer } = await setup(onTestFinished, { upstreamUrl: url })
    const res = await get(`${gateway.url}/download`, await bearer())
    expect(res.statusCode).toBe(200)
    // The client reads nothing for a while: the upstream must stall once the buffers on the way are full.
    res.pause()
    await sleep(600)
    const stalledAt = written
    await sleep(400)
    expect(written).toBe(stalledAt)
    expect(stalledAt).toBeLessThan(total / 2)
    const clientHash = createHash('sha256')
    let received = 0
    res.on('data', (chunk: Buffer) => { received += chunk.length; clientHash.update(chunk) })
    await new Promise((resolve) => res.on('end', resolve).resume())
    expect(received).toBe(total)
    expect(clientHash.digest('hex')).toBe(upstreamHash.digest('hex'))
  })

  it('aborts the upstream request when the client goes away while the upstream is still answering', async ({ onTestFinished }) => {
    let upstreamClosed = 0
    let finished = 0
    const url = await customUpstream(onTestFinished, (_req, res) => {
      res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' })
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: first\n\n')
      res.on('close', () => { upstreamClosed++ })
      res.on('finish', () => { finished++ })
    })
    const { gateway, bearer } = await setup(onTestFinished, { upstreamUrl: url })
    const res = await get(`${gateway.url}/events`, await bearer())
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/event-stream')
    const first = await new Promise<string>((resolve) => res.once('data', (chunk: Buffer) => resolve(chunk.toString())))
    expect(first).toBe('data: first\n\n')
    res.destroy()
    await expect.poll(() => upstreamClosed).toBe(1)
    expect(finished).toBe(0)
    // The client left: logged as 499, and not as the upstream's failure.
    await expect.poll(() => gateway.logs.some((line) => line.includes('"path":"/events"'))).toBe(true)
    const line = JSON.parse(gateway.logs.find((entry) => entry.includes('"path":"/events"'))!) as Record<string, unknown>
    expect(line).toMatchObject({ status: 499, decision: 'forwarded', msg: 'request' })
    expect(gateway.logs.filter((line) => line.includes('"level":50'))).toEqual([])
  })
})

describe('forwarding: bodies', () => {
  const FIFTY_MB = 50 * 1024 * 1024

  /** Retained memory only: garbage the streams leave behind would otherwise look like buffering (test-only flag). */
  function forceGc(): () => void {
    v8.setFlagsFromString('--expose-gc')
    return vm.runInNewContext('gc') as () => void
  }

  async function streamLarge(started: Setup, framing: 'chunked' | 'content-length') {
    const { upstream, gateway, bearer } = started
    const gc = forceGc()
    // Streaming means the upstream gets the start of the body before the client has made the end of it.
    let receivedAt40Mb = -1
    const { stream, digest } = generatedBody(FIFTY_MB, (sent) => {
      if (receivedAt40Mb < 0 && sent >= 40 * 1024 * 1024) receivedAt40Mb = upstream.bodyBytesReceived
    })
    // Twice: buffers freed by the first collection may still be counted until they are swept.
    const retained = () => { gc(); gc(); const usage = process.memoryUsage(); return usage.heapUsed + usage.arrayBuffers }
    const authorization = await bearer()
    const baseline = retained()
    let peak = 0
    const sampler = setInterval(() => { peak = Math.max(peak, retained() - baseline) }, 50)
    try {
      const res = await send(`${gateway.url}/upload`, {
        method: 'PUT',
        headers: {
          authorization,
          'content-type': 'application/octet-stream',
          ...(framing === 'content-length' ? { 'content-length': FIFTY_MB } : { 'transfer-encoding': 'chunked' }),
        },
        body: stream,
      })
      return { res, digest: digest(), peak, receivedAt40Mb }
    } finally {
      clearInterval(sampler)
    }
  }

  it.for(['chunked', 'content-length'] as const)('streams a 50 MB %s body intact without buffering it', { timeout: 60_000 }, async (framing, { onTestFinished }) => {
    const started = await setup(onTestFinished, { server: { max_body_size: '64mb' } })
    const { res, digest, peak, receivedAt40Mb } = await streamLarge(started, framing)
    expect(res.status).toBe(200)
    const seen = started.upstream.requests[0]!
    expect(seen.bodyBytes).toBe(FIFTY_MB)
    expect(seen.bodySha256).toBe(digest)
    if (framing === 'content-length') expect(seen.headers['content-length']).toBe(String(FIFTY_MB))
    else expect(seen.headers['transfer-encoding']).toBe('chunked')
    // Client, gateway and upstream share this process: a buffered copy anywhere would retain ≥ 50 MB.
    expect(peak).toBeLessThan(FIFTY_MB / 4)
    expect(receivedAt40Mb).toBeGreaterThan(16 * 1024 * 1024)
  })

  it('answers 413 JSON to a Content-Length over max_body_size before reading the body, forwarding nothing', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { max_body_size: '1kb' } })
    const res = await send(`${gateway.url}/upload`, {
      method: 'POST',
      headers: { authorization: await bearer(), 'content-length': 10 * 1024 * 1024, 'content-type': 'application/octet-stream' },
      body: generatedBody(10 * 1024 * 1024).stream,
    })
    expect(res.status).toBe(413)
    expect(json(res)).toMatchObject({ error: 'request_too_large' })
    expect(res.headers.connection).toBe('close')
    expect(upstream.requests).toHaveLength(0)
    expect(upstream.incomplete).toHaveLength(0)
  })

  it('answers 413 JSON when a chunked body passes max_body_size mid-stream, and the upstream never gets it whole', async ({ onTestFinished }) => {
    // Streamed from the first byte (no request buffering), so the limit is passed mid-stream to the upstream.
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { max_body_size: '4kb', body_buffer_size: '0b' } })
    const res = await send(`${gateway.url}/upload`, {
      method: 'POST',
      headers: { authorization: await bearer(), 'transfer-encoding': 'chunked', 'content-type': 'application/octet-stream' },
      body: slowChunked(3 * 1024, 256 * 1024),
    })
    expect(res.status).toBe(413)
    expect(json(res)).toMatchObject({ error: 'request_too_large' })
    expect(upstream.requests).toHaveLength(0)
    await expect.poll(() => upstream.incomplete).toHaveLength(1)
    expect(upstream.incomplete[0]!.bodyBytes).toBeLessThanOrEqual(4 * 1024)
  })

  it.for([
    ['the upstream', 'http'],
    ['builtin:echo', 'echo'],
  ] as const)('answers 413 JSON to a chunked body that passes max_body_size in one burst (%s)', async ([, kind], { onTestFinished }) => {
    const started = await setup(onTestFinished, { server: { max_body_size: '4kb' }, ...(kind === 'echo' && { upstreamUrl: 'builtin:echo' }) })
    const authorization = await started.bearer()
    // The limit is passed while the token is still being checked, before any upstream request exists.
    for (let i = 0; i < 10; i++) {
      const res = await send(`${started.gateway.url}/upload`, {
        method: 'POST', headers: { authorization, 'transfer-encoding': 'chunked' }, body: Readable.from([randomBytes(512 * 1024), randomBytes(512 * 1024)]),
      })
      expect(res.status).toBe(413)
      expect(json(res)).toMatchObject({ error: 'request_too_large' })
    }
    expect(started.upstream.requests).toHaveLength(0)
  })

  it('answers 413 JSON to a form body over max_body_size on a protected route, forwarding nothing', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { max_body_size: '4kb' } })
    const form = 'a=' + 'x'.repeat(64 * 1024)
    for (const framing of [{ 'transfer-encoding': 'chunked' }, {}]) {
      const res = await send(`${gateway.url}/forms`, {
        method: 'POST',
        headers: { authorization: await bearer(), 'content-type': 'application/x-www-form-urlencoded', ...framing },
        body: Readable.from([form.slice(0, 3000), form.slice(3000)]),
      })
      expect(res.status).toBe(413)
    }
    expect(upstream.requests).toHaveLength(0)
    expect(upstream.incomplete).toHaveLength(0)
  })

  it('answers 413 to a chunked body that passes max_body_size while it is buffered, never opening an upstream connection', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { max_body_size: '4kb' } })
    const res = await send(`${gateway.url}/upload`, {
      method: 'POST',
      headers: { authorization: await bearer(), 'transfer-encoding': 'chunked', 'content-type': 'application/octet-stream' },
      body: slowChunked(3 * 1024, 256 * 1024),
    })
    expect(res.status).toBe(413)
    expect(upstream.connections).toBe(0)
  })

  it('aborts the upstream request when the client goes away mid-body', async ({ onTestFinished }) => {
    // 16 KiB buffered, then streamed: the 32 KiB written reach the upstream before the client leaves.
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { body_buffer_size: '16kb' } })
    for (const framing of [{ 'transfer-encoding': 'chunked' }, { 'content-length': 1024 * 1024 }]) {
      const req = http.request(`${gateway.url}/upload`, { method: 'POST', agent: false, headers: { authorization: await bearer(), ...framing } })
      req.on('error', () => { /* we abort it ourselves */ })
      const before = upstream.incomplete.length
      const received = upstream.bodyBytesReceived
      req.write(randomBytes(32 * 1024))
      await expect.poll(() => upstream.bodyBytesReceived).toBeGreaterThan(received)
      req.destroy()
      await expect.poll(() => upstream.incomplete.length).toBe(before + 1)
    }
    expect(upstream.requests).toHaveLength(0)
    // The client left: that is not the upstream's failure, so it is not logged as one.
    expect(gateway.logs.filter((line) => line.includes('"level":50'))).toEqual([])
  })

  it('accepts a chunked body of exactly max_body_size', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { server: { max_body_size: '4kb' } })
    const body = randomBytes(4096)
    const res = await send(`${gateway.url}/upload`, {
      method: 'POST', headers: { authorization: await bearer(), 'transfer-encoding': 'chunked' }, body: Readable.from([body.subarray(0, 1000), body.subarray(1000)]),
    })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.bodySha256).toBe(sha256(body))
  })

  it('applies a route\'s own max_body_size instead of the server\'s', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, {
      server: { max_body_size: '1kb' },
      routes: [{ id: 'uploads', path: '/uploads/**', upstream: 'main', max_body_size: '8kb' },
        { id: 'all', path: '/**', upstream: 'main' }],
    })
    const authorization = await bearer()
    const body = randomBytes(6 * 1024)
    const big = await send(`${gateway.url}/uploads/a`, { method: 'POST', headers: { authorization, 'content-length': body.length }, body })
    expect(big.status).toBe(200)
    expect(upstream.requests[0]!.bodySha256).toBe(sha256(body))
    const elsewhere = await send(`${gateway.url}/orders`, { method: 'POST', headers: { authorization, 'content-length': body.length }, body })
    expect(elsewhere.status).toBe(413)
    const tooBigEvenThere = await send(`${gateway.url}/uploads/a`, {
      method: 'POST', headers: { authorization, 'transfer-encoding': 'chunked' }, body: slowChunked(4 * 1024, 64 * 1024, 20),
    })
    expect(tooBigEvenThere.status).toBe(413)
    expect(upstream.requests).toHaveLength(1)
  })

  it('refuses an oversized Content-Length from an anonymous client with 413 before looking for a token', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { max_body_size: '1kb' } })
    const res = await send(`${gateway.url}/orders`, { method: 'POST', headers: { 'content-length': 4096 }, body: randomBytes(4096) })
    expect(res.status).toBe(413)
    expect(res.headers.connection).toBe('close')
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('forwarding: upstream failures', () => {
  it('answers 502 JSON when the upstream refuses the connection', async ({ onTestFinished }) => {
    const port = await closedPort()
    const { gateway, bearer } = await setup(onTestFinished, { upstreamUrl: `http://127.0.0.1:${port}` })
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer() } })
    expect(res.status).toBe(502)
    expect(json(res)).toEqual({ error: 'bad_gateway', error_description: 'the upstream could not be reached' })
    expect(res.headers['www-authenticate']).toBeUndefined()
    // The log says why; the client does not learn the upstream's address.
    expect(res.body).not.toContain(String(port))
    expect(gateway.logs.join('')).toContain('ECONNREFUSED')
  })

  it('answers 504 JSON when the upstream is slower than its timeout', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { upstreamExtra: { timeout: '200ms' } }, { slowMs: 1500 })
    const started = Date.now()
    const res = await send(`${gateway.url}/slow/report`, { headers: { authorization: await bearer() } })
    expect(res.status).toBe(504)
    expect(json(res)).toEqual({ error: 'gateway_timeout', error_description: 'the upstream did not answer in time' })
    expect(Date.now() - started).toBeLessThan(1400)
    // Fast paths of the same upstream still work afterwards.
    expect((await send(`${gateway.url}/orders`, { headers: { authorization: await bearer() } })).status).toBe(200)
    expect(upstream.requests.map((r) => r.url)).toEqual(['/slow/report', '/orders'])
  })

  it('does not count a slow client upload against the upstream timeout', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { upstreamExtra: { timeout: '300ms' } })
    let sent = 0
    const body = new Readable({
      async read() {
        if (sent === 6) { this.push(null); return }
        if (sent > 0) await sleep(100)
        sent++
        this.push(Buffer.from('slow-chunk;'))
      },
    })
    const res = await send(`${gateway.url}/upload`, { method: 'POST', headers: { authorization: await bearer(), 'transfer-encoding': 'chunked' }, body })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.bodyBytes).toBe(6 * 'slow-chunk;'.length)
  })
})

describe('forwarding: builtin:echo', () => {
  it('returns the method, path, query, headers and body it received, identity headers included', async ({ onTestFinished }) => {
    const { issuer, gateway, bearer } = await setup(onTestFinished, { upstreamUrl: 'builtin:echo', forward: { strip_authorization: true } })
    const body = JSON.stringify({ hello: 'world' })
    const res = await send(`${gateway.url}/echo/a/b?x=1&y=two&r=1&r=2&sp=a%20b`, {
      method: 'POST',
      headers: {
        authorization: await bearer({ scope: 'orders:read orders:write' }),
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'x-auth-subject': 'spoofed',
        'x-custom': 'yes',
        'set-cookie': ['s=1', 's=2'],
      },
      body,
    })
    expect(res.status).toBe(200)
    const echoed = json(res)
    // Two fields of one name are shown as both values, as the query's repeated parameters are.
    expect(echoed).toMatchObject({ headers: { 'set-cookie': ['s=1', 's=2'] } })
    expect(echoed).toMatchObject({
      method: 'POST',
      path: '/echo/a/b',
      query: { x: '1', y: 'two', r: ['1', '2'], sp: 'a b' },
      body,
      body_bytes: Buffer.byteLength(body),
      body_truncated: false,
    })
    expect(echoed.headers).toMatchObject({
      'x-auth-subject': 'user-1',
      'x-auth-client-id': 'client-1',
      'x-auth-scopes': 'orders:read orders:write',
      'x-auth-issuer': issuer.issuer,
      'x-custom': 'yes',
      'x-forwarded-for': '127.0.0.1',
      'content-type': 'application/json',
    })
    expect(echoed.headers).not.toHaveProperty('authorization')
  })

  it('still enforces the token and the body limit in front of the echo', async ({ onTestFinished }) => {
    const { gateway } = await setup(onTestFinished, { upstreamUrl: 'builtin:echo', server: { max_body_size: '1kb' } })
    const anonymous = await send(`${gateway.url}/echo`)
    expect(anonymous.status).toBe(401)
    expect(anonymous.headers['www-authenticate']).toBe('Bearer realm="test"')
    expect(json(anonymous)).toMatchObject({ error: 'unauthorized' })
  })

  it('answers 413 when a chunked body sent to the echo passes max_body_size', async ({ onTestFinished }) => {
    const { gateway, bearer } = await setup(onTestFinished, { upstreamUrl: 'builtin:echo', server: { max_body_size: '4kb' } })
    const res = await send(`${gateway.url}/echo`, {
      method: 'POST', headers: { authorization: await bearer(), 'transfer-encoding': 'chunked' }, body: slowChunked(3 * 1024, 64 * 1024),
    })
    expect(res.status).toBe(413)
    expect(json(res)).toMatchObject({ error: 'request_too_large' })
  })
})
