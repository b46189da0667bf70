/**
 * WebSocket upgrades (issue 2, point 8): forwarded only after the route matched and the token was
 * validated; every refusal is an HTTP response on the socket and never reaches the upstream.
 */
import type { IncomingMessage } from 'node:http'
import { describe, expect, it, type TestContext } from 'vitest'
import WebSocket from 'ws'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { createSigningKey, startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

interface Setup {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  wsUrl(path: string): string
}

async function setup(onTestFinished: TestContext['onTestFinished'], routes?: Record<string, unknown>[], upstreamUrl?: string): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({ upstream: { url: upstreamUrl ?? upstream.url }, issuer, ...(routes && { routes }) }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway, wsUrl: (path) => `${gateway.url.replace(/^http/, 'ws')}${path}` }
}

/** Opens a client and resolves once it is open, with its first message (the upstream's greeting). */
function connect(url: string, headers: Record<string, string> = {}, protocols?: string[]): Promise<{ ws: WebSocket; hello: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers })
    ws.once('message', (data) => resolve({ ws, hello: JSON.parse(String(data)) as Record<string, unknown> }))
    ws.once('unexpected-response', (_req, res) => reject(new Error(`unexpected ${res.statusCode}`)))
    ws.once('error', reject)
  })
}

interface Refusal {
  status: number
  headers: IncomingMessage['headers']
  body: Record<string, unknown>
}

/** Attempts an upgrade that must be refused, and returns the HTTP response the gateway wrote instead. */
function refused(url: string, headers: Record<string, string> = {}): Promise<Refusal> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.once('open', () => { ws.terminate(); reject(new Error('the upgrade was accepted')) })
    ws.once('error', () => { /* reported through unexpected-response */ })
    ws.once('unexpected-response', (_req, res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => {
        ws.terminate()
        resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> })
      })
    })
  })
}

function nextMessage(ws: WebSocket): Promise<WebSocket.RawData> {
  return new Promise((resolve) => ws.once('message', resolve))
}

describe('websocket: forwarded after validation', () => {
  it('forwards an upgrade with a valid token, sets identity headers and carries messages both ways', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished)
    const token = await issuer.sign({ scope: 'orders:read' })
    const { ws, hello } = await connect(wsUrl('/stream/orders?since=5'), {
      authorization: `Bearer ${token}`,
      'x-auth-subject': 'admin',
      'x-auth-scopes': 'orders:admin',
    }, ['orders.v1'])
    onTestFinished(() => { ws.terminate() })
    expect(hello).toEqual({ hello: true, subject: 'user-1' })
    expect(ws.protocol).toBe('orders.v1')

    ws.send('ping')
    expect(String(await nextMessage(ws))).toBe('echo:ping')
    const big = 'x'.repeat(256 * 1024)
    ws.send(big)
    expect(String(await nextMessage(ws))).toBe(`echo:${big}`)

    expect(upstream.upgrades).toHaveLength(1)
    const seen = upstream.upgrades[0]!
    expect(seen['x-auth-subject']).toBe('user-1')
    expect(seen['x-auth-scopes']).toBe('orders:read')
    expect(seen['x-auth-issuer']).toBe(issuer.issuer)
    expect(seen['x-forwarded-for']).toBe('127.0.0.1')
    expect(seen['sec-websocket-protocol']).toBe('orders.v1')
    expect(upstream.requests).toHaveLength(0)

    const closed = new Promise<number>((resolve) => ws.once('close', resolve))
    ws.close(1000)
    expect(await closed).toBe(1000)
  })

  it('forwards an upgrade on an auth: none route without identity headers, spoofed ones removed', async ({ onTestFinished }) => {
    const { upstream, wsUrl } = await setup(onTestFinished, [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' }])
    const { ws, hello } = await connect(wsUrl('/public/feed'), { 'x-auth-subject': 'admin', 'x-auth-client-id': 'trusted' })
    onTestFinished(() => { ws.terminate() })
    expect(hello).toEqual({ hello: true, subject: null })
    expect(upstream.upgrades[0]).not.toHaveProperty('x-auth-subject')
    expect(upstream.upgrades[0]).not.toHaveProperty('x-auth-client-id')
  })

  it('closes forwarded sockets when the gateway shuts down', async ({ onTestFinished }) => {
    const { gateway, issuer, wsUrl } = await setup(onTestFinished)
    const { ws } = await connect(wsUrl('/stream'), { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` })
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()))
    await gateway.close()
    await closed
    expect(ws.readyState).toBe(WebSocket.CLOSED)
  })
})

describe('websocket: refused before the upstream', () => {
  it('answers 401 without an error code when the upgrade carries no token', async ({ onTestFinished }) => {
    const { upstream, wsUrl } = await setup(onTestFinished)
    const res = await refused(wsUrl('/stream'))
    expect(res.status).toBe(401)
    expect(res.headers['www-authenticate']).toBe('Bearer realm="test"')
    expect(res.body).toMatchObject({ error: 'unauthorized' })
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('answers 401 invalid_token to an upgrade with a token signed by an unknown key', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished)
    const forged = await issuer.sign({ scope: 'orders:read' }, { key: await createSigningKey('ES256', issuer.keys[0]!.kid) })
    const res = await refused(wsUrl('/stream'), { authorization: `Bearer ${forged}` })
    expect(res.status).toBe(401)
    expect(res.headers['www-authenticate']).toContain('error="invalid_token"')
    expect(res.body).toMatchObject({ error: 'invalid_token' })
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('answers 401 invalid_token to an upgrade with an expired token', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished)
    const expired = await issuer.sign({ scope: 'orders:read' }, { expiresIn: -3600 })
    const res = await refused(wsUrl('/stream'), { authorization: `Bearer ${expired}` })
    expect(res.status).toBe(401)
    expect(res.headers['www-authenticate']).toContain('error="invalid_token"')
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('answers 403 insufficient_scope to an upgrade whose token lacks the route\'s scope', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished,
      [{ id: 'stream', path: '/stream/**', upstream: 'main', scopes: { all: ['orders:stream'] } }])
    const res = await refused(wsUrl('/stream/orders'), { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` })
    expect(res.status).toBe(403)
    expect(res.headers['www-authenticate']).toContain('error="insufficient_scope"')
    expect(res.headers['www-authenticate']).toContain('scope="orders:stream"')
    expect(res.body).toMatchObject({ error: 'insufficient_scope' })
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('answers 400 invalid_request to an upgrade carrying its token in the query string', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished)
    const res = await refused(wsUrl(`/stream?access_token=${await issuer.sign({ scope: 'orders:read' })}`))
    expect(res.status).toBe(400)
    expect(res.headers['www-authenticate']).toContain('error="invalid_request"')
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('answers 404 to an upgrade on a path no route matches', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished, [{ id: 'orders', path: '/orders/**', upstream: 'main' }])
    const res = await refused(wsUrl('/elsewhere'), { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` })
    expect(res.status).toBe(404)
    expect(res.body).toMatchObject({ error: 'not_found' })
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('refuses an identity claim that cannot be a header value on the upgrade too', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished)
    const res = await refused(wsUrl('/stream'), { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read', sub: 'a\r\nX-Evil: 1' })}` })
    expect(res.status).toBe(401)
    expect(res.body).toMatchObject({ error: 'invalid_token' })
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('refuses upgrades to anything but WebSocket', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway } = await setup(onTestFinished)
    const token = await issuer.sign({ scope: 'orders:read' })
    const res = await rawRequest(gateway.port, 'GET /stream HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\n' +
      `Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nAuthorization: Bearer ${token}\r\n\r\n`)
    expect(res.status).toBe(400)
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_request' })
    expect(upstream.upgrades).toHaveLength(0)
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 502 when the upstream cannot be reached for the upgrade', async ({ onTestFinished }) => {
    const port = await closedPort()
    const { issuer, wsUrl } = await setup(onTestFinished, undefined, `http://127.0.0.1:${port}`)
    const res = await refused(wsUrl('/stream'), { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` })
    expect(res.status).toBe(502)
    expect(res.body).toMatchObject({ error: 'bad_gateway' })
  })
})

describe('websocket: an upgrade is a GET over HTTP/1.1 (issue 15, item 1)', () => {
  const upgradeHead = 'Host: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n' +
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n'
  const corsAndScoped = [
    { id: 'preflight', path: '/**', methods: ['OPTIONS'], upstream: 'main', auth: 'none' },
    { id: 'ws', path: '/ws/**', methods: ['GET'], upstream: 'main', scopes: { all: ['ws'] } },
    { id: 'hook', path: '/hook/**', methods: ['POST'], upstream: 'main', auth: 'none' },
  ]

  it('refuses an OPTIONS upgrade on an anonymous route with 400: the upstream never sees the scoped GET', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, corsAndScoped)
    const res = await rawRequest(gateway.port, `OPTIONS /ws/chat HTTP/1.1\r\n${upgradeHead}\r\n`)
    expect(res.status).toBe(400)
    expect(JSON.parse(res.body)).toMatchObject({ error: 'invalid_request' })
    expect(upstream.upgrades).toHaveLength(0)
    expect(upstream.requests).toHaveLength(0)
  })

  it('refuses a POST upgrade on an anonymous POST route with 400', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, corsAndScoped)
    const res = await rawRequest(gateway.port, `POST /hook/x HTTP/1.1\r\n${upgradeHead}Content-Length: 0\r\n\r\n`)
    expect(res.status).toBe(400)
    expect(upstream.upgrades).toHaveLength(0)
    expect(upstream.requests).toHaveLength(0)
  })

  it('refuses an upgrade over HTTP/1.0 with 400, even with a valid token', async ({ onTestFinished }) => {
    const { upstream, gateway, issuer } = await setup(onTestFinished, corsAndScoped)
    const token = await issuer.sign({ scope: 'ws' })
    const res = await rawRequest(gateway.port, `GET /ws/chat HTTP/1.0\r\n${upgradeHead}Authorization: Bearer ${token}\r\n\r\n`)
    expect(res.status).toBe(400)
    expect(upstream.upgrades).toHaveLength(0)
    expect(upstream.requests).toHaveLength(0)
  })

  it('still forwards a GET upgrade with the scope the route needs', async ({ onTestFinished }) => {
    const { upstream, issuer, wsUrl } = await setup(onTestFinished, corsAndScoped)
    const { ws, hello } = await connect(wsUrl('/ws/chat'), { authorization: `Bearer ${await issuer.sign({ scope: 'ws' })}` })
    onTestFinished(() => { ws.terminate() })
    expect(hello).toEqual({ hello: true, subject: 'user-1' })
    expect(upstream.upgrades).toHaveLength(1)
  })
})
