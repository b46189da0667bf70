/**
 * Issue 15 (gateway hardening): what reached the upstream although it should not have, each refused or
 * removed here, and every refusal proven not to have reached the upstream.
 */
import http from 'node:http'
import { describe, expect, it, type TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startAuthServerGateway, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

type ConfigParts = Omit<Parameters<typeof testConfig>[0], 'upstream' | 'issuer'>

interface Setup {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  bearer(claims?: Record<string, unknown>): Promise<string>
}

async function setup(onTestFinished: TestContext['onTestFinished'], parts: ConfigParts = {}): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({ upstream: { url: upstream.url }, issuer, ...parts }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway, bearer: async (claims = {}) => `Bearer ${await issuer.sign({ scope: 'orders:read', ...claims })}` }
}

function send(url: string, options: { method?: string; headers?: http.OutgoingHttpHeaders; body?: string } = {}):
  Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method ?? 'GET', headers: options.headers, agent: false })
    req.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
    })
    req.on('error', reject)
    req.end(options.body)
  })
}

describe('the gateway\'s own cookies never reach an upstream (item 4)', () => {
  it('removes portcullis_session and portcullis_csrf from a proxied request and keeps the other cookies', async ({ onTestFinished }) => {
    const upstream = await startRecordingUpstream()
    const gateway = await startAuthServerGateway({}, {
      upstreams: { app: { url: upstream.url } },
      routes: [{ id: 'public', path: '/public/**', upstream: 'app', auth: 'none' }],
    })
    onTestFinished(async () => { await gateway.close(); await upstream.close() })
    const res = await send(`${gateway.url}/public/page`,
      { headers: { cookie: 'theme=dark; portcullis_csrf=c5rf-secret; portcullis_session=s3ssion;app=1; portcullis_sessionx=kept' } })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers.cookie).toBe('theme=dark; app=1; portcullis_sessionx=kept')
    const only = await send(`${gateway.url}/public/page`, { headers: { cookie: 'portcullis_session=s3ssion; portcullis_csrf=x' } })
    expect(only.status).toBe(200)
    expect(upstream.requests[1]!.headers).not.toHaveProperty('cookie')
    expect(JSON.stringify(upstream.requests)).not.toContain('s3ssion')
  })
})

describe('identity header values read one way (item 8)', () => {
  for (const [what, sub] of [
    ['spaces around it', ' admin '], ['a comma (a list to many parsers)', 'alice, admin'], ['an empty string', ''],
    ['a double quote', '"admin"'], ['a tab', 'alice\tadmin'], ['a trailing space', 'alice '],
  ] as const) {
    it(`refuses a token whose sub has ${what} with 401 invalid_token, nothing forwarded`, async ({ onTestFinished }) => {
      const { upstream, gateway, bearer } = await setup(onTestFinished)
      const authorization = await bearer({ sub })
      // The second time from the token cache: its principal is refused again, not remembered as forwarded.
      for (let i = 0; i < 2; i++) {
        const res = await send(`${gateway.url}/orders`, { headers: { authorization } })
        expect(res.status).toBe(401)
        expect(res.headers['www-authenticate']).toContain('error="invalid_token"')
      }
      expect(upstream.requests).toHaveLength(0)
    })
  }

  it("gives each cached principal its own values: two tokens in turn, each forwarded with its own identity", async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const alice = await bearer({ sub: 'alice', client_id: 'app-a', scope: 'orders:read' })
    const bob = await bearer({ sub: 'bob', client_id: 'app-b', scope: 'orders:read orders:write' })
    for (let i = 0; i < 3; i++) {
      for (const authorization of [alice, bob]) expect((await send(`${gateway.url}/orders`, { headers: { authorization } })).status).toBe(200)
    }
    const seen = upstream.requests.map(({ headers }) => [headers['x-auth-subject'], headers['x-auth-client-id'], headers['x-auth-scopes']])
    const pair = [['alice', 'app-a', 'orders:read'], ['bob', 'app-b', 'orders:read orders:write']]
    expect(seen).toEqual([...pair, ...pair, ...pair])
  })

  it('refuses a scope with a comma and a client_id with spaces around it', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    for (const claims of [{ scope: 'orders:read a,admin' }, { client_id: ' trusted ' }]) {
      const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(claims) } })
      expect(res.status, JSON.stringify(claims)).toBe(401)
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('forwards a subject with inner spaces and punctuation unchanged, and no scopes as an empty header', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer({ sub: 'Alice Example <a@x.io>;1', scope: '' }) } })
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers['x-auth-subject']).toBe('Alice Example <a@x.io>;1')
    expect(upstream.requests[0]!.headers['x-auth-scopes']).toBe('')
  })
})

describe('forwarding and override headers (item 9)', () => {
  const sent = {
    'x-forwarded-port': '8443', 'x-forwarded-prefix': '/admin', 'x-forwarded-server': 'evil', 'x-real-ip': '203.0.113.9',
    'x-client-ip': '203.0.113.9', 'true-client-ip': '203.0.113.9', 'x-original-url': '/admin/delete', 'x-rewrite-url': '/admin/delete',
    'x-http-method-override': 'DELETE', 'x-method-override': 'DELETE', 'x-http-method': 'DELETE', 'x-custom-debug': 'on',
  }

  it('removes them and sets X-Forwarded-Port and X-Real-IP to what the gateway saw', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { forward: { strip_headers: ['X-Custom-Debug'] } })
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(), ...sent, 'x-kept': 'yes' } })
    expect(res.status).toBe(200)
    const headers = upstream.requests[0]!.headers
    expect(headers['x-forwarded-port']).toBe(String(gateway.port))
    expect(headers['x-real-ip']).toBe('127.0.0.1')
    for (const name of Object.keys(sent).filter((name) => name !== 'x-forwarded-port' && name !== 'x-real-ip')) {
      expect(headers, name).not.toHaveProperty(name)
    }
    expect(headers['x-kept']).toBe('yes')
    expect(upstream.requests[0]!.method).toBe('GET')
  })

  it('keeps a trusted load balancer\'s X-Forwarded-Port and X-Real-IP, and still removes the overrides', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, { forward: { trust_forwarded_headers: true } })
    const res = await send(`${gateway.url}/orders`, { headers: { authorization: await bearer(), ...sent } })
    expect(res.status).toBe(200)
    const headers = upstream.requests[0]!.headers
    expect(headers).toMatchObject({ 'x-forwarded-port': '8443', 'x-real-ip': '203.0.113.9', 'x-custom-debug': 'on' })
    for (const name of ['x-original-url', 'x-rewrite-url', 'x-http-method-override', 'x-method-override', 'x-http-method', 'true-client-ip']) {
      expect(headers, name).not.toHaveProperty(name)
    }
  })
})

describe('one token, one place (item 7; RFC 6750 §2, §3.1)', () => {
  it('refuses a form access_token beside the header even when the content type is a list', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    for (const type of ['application/x-www-form-urlencoded , text/plain', 'text/plain, application/x-www-form-urlencoded', 'Application/X-WWW-Form-Urlencoded;charset=utf-8']) {
      const res = await send(`${gateway.url}/orders`, {
        method: 'POST', headers: { authorization: await bearer(), 'content-type': type }, body: 'a=1&access_token=other',
      })
      expect(res.status, type).toBe(400)
      expect(res.headers['www-authenticate']).toContain('error="invalid_request"')
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('refuses a form access_token on an auth: optional route with no header instead of forwarding it as anonymous', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { routes: [{ id: 'opt', path: '/**', upstream: 'main', auth: 'optional' }] })
    for (const body of ['access_token=forged', 'x=1;access_token=forged', 'access.token=forged', 'access%5Ftoken=forged']) {
      const res = await send(`${gateway.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body })
      expect(res.status, body).toBe(400)
    }
    expect(upstream.requests).toHaveLength(0)
    const plain = await send(`${gateway.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'q=1' })
    expect(plain.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it('refuses a query access_token after a ; or spelled as PHP reads it, beside a valid header', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    for (const query of ['?a=1;access_token=other', '?access.token=other', '?access[token=other', '?access%20token=other']) {
      const res = await send(`${gateway.url}/orders${query}`, { headers: { authorization: await bearer() } })
      expect(res.status, query).toBe(400)
      expect(res.headers['www-authenticate']).toContain('error="invalid_request"')
    }
    expect(upstream.requests).toHaveLength(0)
  })
})

/** Sends `head`, waits `waitMs`, records what came back, then sends `body` (if any) and reads to the end. */
async function rawExchange(port: number, head: string, body?: string, waitMs = 300): Promise<{ beforeBody: string; all: string }> {
  const net = await import('node:net')
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(head))
    let all = ''
    let beforeBody: string | undefined
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { all += chunk })
    socket.on('error', reject)
    setTimeout(() => {
      beforeBody = all
      if (body !== undefined && !socket.destroyed) socket.write(body)
    }, waitMs)
    // Closed before the wait was over: everything came before the body.
    socket.on('close', () => resolve({ beforeBody: beforeBody ?? all, all }))
    setTimeout(() => socket.end(), waitMs + 1500).unref()
  })
}

describe('HTTP leniencies (item 10)', () => {
  it('answers 400 to two Host headers, on a protected and on an anonymous route, nothing forwarded', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished, {
      routes: [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' }, { id: 'all', path: '/**', upstream: 'main' }],
    })
    for (const path of ['/public/x', '/orders']) {
      const { all } = await rawExchange(gateway.port,
        `GET ${path} HTTP/1.1\r\nHost: gw\r\nHost: internal.admin\r\nAuthorization: ${await bearer()}\r\n\r\n`)
      expect(all, path).toMatch(/^HTTP\/1\.1 400 /)
      expect(all).toContain('"invalid_request"')
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 400 to two Host headers at the authorization server too', async ({ onTestFinished }) => {
    const gateway = await startAuthServerGateway({})
    onTestFinished(() => gateway.close())
    const { all } = await rawExchange(gateway.port, 'GET /jwks HTTP/1.1\r\nHost: gw\r\nHost: other\r\n\r\n')
    expect(all).toMatch(/^HTTP\/1\.1 400 /)
  })

  it('answers 505 to an HTTP/2.0 request line and closes the connection, nothing forwarded', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const { all } = await rawExchange(gateway.port, `GET /orders HTTP/2.0\r\nHost: gw\r\nAuthorization: ${await bearer()}\r\n\r\n`)
    expect(all).toMatch(/^HTTP\/1\.1 505 /)
    expect(all.toLowerCase()).toContain('connection: close')
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers Expect: 100-continue with the refusal, never 100, when the request is not authorized', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished)
    const { beforeBody, all } = await rawExchange(gateway.port,
      'POST /orders HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n', 'hello')
    expect(beforeBody).toMatch(/^HTTP\/1\.1 401 /)
    expect(all).not.toContain('100 Continue')
    expect(upstream.requests).toHaveLength(0)
  })

  it('sends 100 Continue once the token is validated, then forwards the body', async ({ onTestFinished }) => {
    const { upstream, gateway, bearer } = await setup(onTestFinished)
    const { beforeBody, all } = await rawExchange(gateway.port, 'POST /orders HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n' +
      `Authorization: ${await bearer()}\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n`, 'hello')
    expect(beforeBody).toBe('HTTP/1.1 100 Continue\r\n\r\n')
    expect(all).toContain('HTTP/1.1 200 ')
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.bodyBytes).toBe(5)
    expect(upstream.requests[0]!.headers).not.toHaveProperty('expect')
  })
})
