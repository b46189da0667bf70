/**
 * HTTP/2 on the public listener (RFC 9113, server.http2), with clients nobody here wrote: curl (nghttp2) over
 * TLS by ALPN and in cleartext with prior knowledge, and node's HTTP/2 client where a request must be shaped by
 * hand. The same request path as HTTP/1.1: what reaches the upstream, and what never does.
 */
import { execFile } from 'node:child_process'
import http2 from 'node:http2'
import { promisify } from 'node:util'
import { describe, expect, it, type TestContext } from 'vitest'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startAuthServerGateway, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { createTestCa, type TestCa } from '../support/tls.js'

const run = promisify(execFile)

interface Setup {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  authorization: string
}

async function setup(onTestFinished: TestContext['onTestFinished'], server: Record<string, unknown>): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({ upstream, issuer, server }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway, authorization: `Bearer ${await issuer.sign({ scope: 'orders:read', sub: 'alice' })}` }
}

/** curl's answer: the HTTP version it spoke, the status, the headers (lower-case names) and the body. */
async function curl(args: readonly string[]): Promise<{ version: string; status: number; headers: string; body: string }> {
  const { stdout } = await run('curl', ['-sS', '-D', '-', '-w', '\n%{http_version} %{response_code}', ...args], { timeout: 10_000 })
  const [text, last] = [stdout.slice(0, stdout.lastIndexOf('\n')), stdout.slice(stdout.lastIndexOf('\n') + 1)]
  const [version = '', status = '0'] = last.split(' ')
  const split = text.indexOf('\r\n\r\n')
  return { version, status: Number(status), headers: text.slice(0, split).toLowerCase(), body: text.slice(split + 4) }
}

/** One request on a fresh HTTP/2 session: the response's headers and body. */
function h2Request(url: string, headers: http2.OutgoingHttpHeaders, body?: string, options: http2.SecureClientSessionOptions = {}):
  Promise<{ headers: http2.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url, options)
    session.on('error', reject)
    const stream = session.request(headers, { endStream: body === undefined })
    let received = ''
    let answer: http2.IncomingHttpHeaders = {}
    stream.setEncoding('utf8')
    stream.on('response', (h) => { answer = h })
    stream.on('data', (chunk: string) => { received += chunk })
    stream.on('end', () => { session.close(); resolve({ headers: answer, body: received }) })
    stream.on('error', reject)
    if (body !== undefined) {
      // Written in pieces without a content-length: an HTTP/2 body is its DATA frames (RFC 9113 §8.1).
      stream.write(body.slice(0, 3))
      setTimeout(() => stream.end(body.slice(3)), 20)
    }
  })
}

describe('HTTP/2 in cleartext with prior knowledge (server.http2.cleartext)', () => {
  it('curl --http2-prior-knowledge: forwarded as any request, X-Forwarded-Host from :authority, no pseudo-header and no spoofed identity upstream', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { http2: { cleartext: true } })
    const answer = await curl(['--http2-prior-knowledge', '-H', `authorization: ${authorization}`, '-H', 'x-auth-subject: mallory',
      `http://127.0.0.1:${gateway.port}/orders/7?x=1`])
    expect(answer.version).toBe('2')
    expect(answer.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    const seen = upstream.requests[0]!
    expect(seen.url).toBe('/orders/7?x=1')
    expect(seen.headers.host).toBe(`127.0.0.1:${upstream.port}`)
    expect(seen.headers['x-forwarded-host']).toBe(`127.0.0.1:${gateway.port}`)
    expect(seen.headers['x-auth-subject']).toBe('alice')
    expect(Object.keys(seen.headers).filter((name) => name.startsWith(':'))).toEqual([])
    expect(seen.rawHeaders.filter((_, i) => i % 2 === 0).filter((name) => name.toLowerCase() === 'x-auth-subject')).toHaveLength(1)
  })

  it('HTTP/1.1 still served on the same port', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { http2: { cleartext: true } })
    const answer = await curl(['--http1.1', '-H', `authorization: ${authorization}`, `http://127.0.0.1:${gateway.port}/orders/7`])
    expect(answer.version).toBe('1.1')
    expect(answer.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it('a refusal over HTTP/2: 401 with its challenge and JSON body, no Connection field; the upstream never reached', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { http2: { cleartext: true } })
    const answer = await curl(['--http2-prior-knowledge', `http://127.0.0.1:${gateway.port}/orders/7`])
    expect(answer.version).toBe('2')
    expect(answer.status).toBe(401)
    expect(answer.headers).toContain('www-authenticate: bearer realm="test"')
    expect(answer.headers).not.toContain('connection:')
    expect(JSON.parse(answer.body)).toMatchObject({ error: 'unauthorized' })
    expect(upstream.requests).toHaveLength(0)
  })

  it('a body sent as DATA frames without a content-length reaches the upstream whole; one refused is never read', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { http2: { cleartext: true } })
    const url = `http://127.0.0.1:${gateway.port}`
    const sent = await h2Request(url, { ':method': 'POST', ':path': '/orders', authorization, 'content-type': 'text/plain' }, 'hello, upstream')
    expect(sent.headers[':status']).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.bodyBytes).toBe('hello, upstream'.length)
    const refused = await h2Request(url, { ':method': 'POST', ':path': '/orders', 'content-type': 'text/plain' }, 'never read')
    expect(refused.headers[':status']).toBe(401)
    expect(upstream.requests).toHaveLength(1)
  })

  it('a Host that names another authority than :authority is 400 (RFC 9113 §8.3.1); the upstream never reached', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { http2: { cleartext: true } })
    const url = `http://127.0.0.1:${gateway.port}`
    const answer = await h2Request(url, { ':path': '/orders/1', ':authority': `127.0.0.1:${gateway.port}`, host: 'elsewhere.example', authorization })
    expect(answer.headers[':status']).toBe(400)
    expect(upstream.requests).toHaveLength(0)
    // Host alone (no :authority) is how some clients name it: the host the client asked for, as for HTTP/1.1.
    const hostOnly = await h2Request(url, { ':path': '/orders/1', host: 'orders.example', authorization })
    expect(hostOnly.headers[':status']).toBe(200)
    expect(upstream.requests.map((request) => request.headers['x-forwarded-host'])).toEqual(['orders.example'])
  })

  it('without server.http2.cleartext a prior-knowledge connection is not served, and nothing is forwarded', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, {})
    await expect(curl(['--http2-prior-knowledge', '-H', `authorization: ${authorization}`, `http://127.0.0.1:${gateway.port}/orders/7`]))
      .rejects.toThrow()
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('the body limits of HTTP/1.1 hold on HTTP/2', () => {
  /** A POST on a fresh session, its body written in `parts` `gapMs` apart (no content-length: DATA frames only). */
  function post(url: string, authorization: string, parts: readonly string[], gapMs: number): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const session = http2.connect(url)
      session.on('error', () => {})
      const stream = session.request({ ':method': 'POST', ':path': '/orders', authorization, 'content-type': 'text/plain' })
      let status = 0
      let body = ''
      stream.setEncoding('utf8')
      stream.on('response', (headers) => { status = Number(headers[':status']) })
      stream.on('data', (chunk: string) => { body += chunk })
      stream.on('close', () => { session.destroy(); resolve({ status, body }) })
      stream.on('error', () => {})
      void (async () => {
        for (const [i, part] of parts.entries()) {
          if (i > 0) await new Promise((resolve) => setTimeout(resolve, gapMs))
          if (stream.destroyed) return
          stream.write(part)
        }
        stream.end()
      })().catch(reject)
    })
  }

  it('a body past max_body_size is 413, one that pauses past body_timeout 408; neither reaches the upstream', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished,
      { http2: { cleartext: true }, max_body_size: '1kb', body_timeout: '300ms' })
    const url = `http://127.0.0.1:${gateway.port}`
    const large = await post(url, authorization, ['x'.repeat(800), 'y'.repeat(800)], 10)
    expect(large.status).toBe(413)
    expect(JSON.parse(large.body)).toMatchObject({ error: 'request_too_large' })
    const slow = await post(url, authorization, ['first', 'too late'], 1200)
    expect(slow.status).toBe(408)
    expect(upstream.requests).toHaveLength(0)
    // A body within both is forwarded whole.
    expect((await post(url, authorization, ['a'.repeat(500), 'b'.repeat(400)], 50)).status).toBe(200)
    expect(upstream.requests.map((request) => request.bodyBytes)).toEqual([900])
  })

  it('a refused request whose body was left unread: the other streams are served, and the connection ends when the client goes', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { http2: { cleartext: true }, body_timeout: '300ms' })
    const session = http2.connect(`http://127.0.0.1:${gateway.port}`)
    onTestFinished(() => { session.destroy() })
    const status = (stream: http2.ClientHttp2Stream) => new Promise<number>((resolve) => {
      stream.on('response', (headers) => resolve(Number(headers[':status'])))
      stream.on('error', () => resolve(0))
      stream.resume()
    })
    // A body that stops: refused 408 while the client still has it open, and keeps sending after.
    const slow = session.request({ ':method': 'POST', ':path': '/orders', authorization, 'content-type': 'text/plain' })
    slow.write('first')
    expect(await status(slow)).toBe(408)
    if (!slow.destroyed) slow.write('x'.repeat(32_000))
    // The next stream on the same connection is served: node reads the connection on.
    const next = session.request({ ':path': '/orders/2', authorization }, { endStream: true })
    expect(await status(next)).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/orders/2'])
    // A stream left paused with DATA in it would keep node from reading the connection's end: it would never close.
    session.destroy()
    const server = gateway.app.server
    const deadline = Date.now() + 2000
    let open = 1
    while (open > 0 && Date.now() < deadline) {
      open = await new Promise<number>((resolve) => server.getConnections((_error, count) => resolve(count)))
      if (open > 0) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(open).toBe(0)
  })
})

describe('HTTP/2 over TLS by ALPN', () => {
  let ca: TestCa
  it('curl --http2 negotiates h2 and is forwarded; curl --http1.1 on the same listener gets HTTP/1.1', async ({ onTestFinished }) => {
    ca = createTestCa()
    onTestFinished(() => ca.remove())
    const cert = ca.issue('gateway', ['IP:127.0.0.1'])
    const { upstream, gateway, authorization } = await setup(onTestFinished, { tls: { cert_file: cert.certFile, key_file: cert.keyFile } })
    const h2 = await curl(['--http2', '--cacert', ca.caFile, '-H', `authorization: ${authorization}`, `https://127.0.0.1:${gateway.port}/orders/1`])
    expect(h2.version).toBe('2')
    expect(h2.status).toBe(200)
    const h1 = await curl(['--http1.1', '--cacert', ca.caFile, '-H', `authorization: ${authorization}`, `https://127.0.0.1:${gateway.port}/orders/2`])
    expect(h1.version).toBe('1.1')
    expect(h1.status).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/orders/1', '/orders/2'])
    expect(upstream.requests[0]!.headers['x-forwarded-proto']).toBe('https')
  })
})

/** An HTTP/2 upstream in cleartext (h2c) that records each request's headers and answers with a trailer. */
async function startH2Upstream(onTestFinished: TestContext['onTestFinished']): Promise<{ url: string; requests: http2.IncomingHttpHeaders[] }> {
  const requests: http2.IncomingHttpHeaders[] = []
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    requests.push(headers)
    stream.resume()
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'text/plain' }, { waitForTrailers: true })
      stream.on('wantTrailers', () => stream.sendTrailers({ 'x-checksum': 'abc123' }))
      stream.end('from h2')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, requests }
}

describe('to an HTTP/2 upstream (upstreams.<name>.http2)', () => {
  it('an HTTP/1.1 client\'s connection-specific fields are not sent (RFC 9113 §8.2.2), TE only as trailers; trailers come back', async ({ onTestFinished }) => {
    const h2 = await startH2Upstream(onTestFinished)
    const issuer = await startTestIssuer()
    onTestFinished(() => issuer.close())
    const gateway = await startGateway(testConfig({ upstream: h2, upstreamExtra: { http2: true }, issuer }))
    onTestFinished(() => gateway.close())
    const token = await issuer.sign({ scope: 'orders:read', sub: 'alice' })
    // curl over HTTP/1.1 sends what an HTTP/2 request must not carry: Connection and what it names, Keep-Alive, TE.
    const answer = await curl(['--http1.1', '--raw', '-H', `authorization: Bearer ${token}`, '-H', 'connection: keep-alive, x-hop',
      '-H', 'x-hop: 1', '-H', 'keep-alive: timeout=5', '-H', 'te: trailers', '-H', 'x-kept: yes', `http://127.0.0.1:${gateway.port}/orders/1`])
    expect(answer.status).toBe(200)
    expect(answer.body).toContain('from h2')
    expect(h2.requests).toHaveLength(1)
    const seen = h2.requests[0]!
    for (const name of ['connection', 'keep-alive', 'x-hop', 'upgrade', 'transfer-encoding', 'proxy-connection']) expect(seen[name], name).toBeUndefined()
    expect(seen.te).toBe('trailers')
    expect(seen['x-kept']).toBe('yes')
    expect(seen['x-auth-subject']).toBe('alice')
    // Chunked to the HTTP/1.1 client, the upstream's trailer after the body.
    expect(answer.body).toMatch(/x-checksum: abc123/i)
  })

  it('an HTTP/2 client through to an HTTP/2 upstream: the trailer arrives as an HTTP/2 trailer', async ({ onTestFinished }) => {
    const h2 = await startH2Upstream(onTestFinished)
    const issuer = await startTestIssuer()
    onTestFinished(() => issuer.close())
    const gateway = await startGateway(testConfig({ upstream: h2, upstreamExtra: { http2: true }, issuer, server: { http2: { cleartext: true } } }))
    onTestFinished(() => gateway.close())
    const token = await issuer.sign({ scope: 'orders:read', sub: 'alice' })
    const trailers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const session = http2.connect(`http://127.0.0.1:${gateway.port}`)
      const stream = session.request({ ':path': '/orders/1', authorization: `Bearer ${token}`, te: 'trailers' })
      stream.on('trailers', (fields) => { session.close(); resolve(fields) })
      stream.on('error', reject)
      stream.resume()
    })
    expect(trailers['x-checksum']).toBe('abc123')
    expect(h2.requests[0]!.te).toBe('trailers')
  })
})

describe('the embedded authorization server over HTTP/2', () => {
  it('discovery and a client_credentials grant over h2c, then the token used on the same connection', async ({ onTestFinished }) => {
    const gateway = await startAuthServerGateway(
      { clients: [{ client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef', grant_types: ['client_credentials'], scopes: ['read'] }] },
      { server: { http2: { cleartext: true } }, routes: [{ id: 'api', path: '/api/**', upstream: 'echo', scopes: { all: ['read'] } }] })
    onTestFinished(() => gateway.close())
    const session = http2.connect(gateway.issuer)
    onTestFinished(() => { session.destroy() })
    const call = (headers: http2.OutgoingHttpHeaders, body?: string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request(headers, { endStream: body === undefined })
      let status = 0
      let text = ''
      stream.setEncoding('utf8')
      stream.on('response', (h) => { status = Number(h[':status']) })
      stream.on('data', (chunk: string) => { text += chunk })
      stream.on('end', () => resolve({ status, body: text }))
      stream.on('error', reject)
      if (body !== undefined) stream.end(body)
    })
    const discovery = await call({ ':path': '/.well-known/oauth-authorization-server' })
    expect(discovery.status).toBe(200)
    expect(JSON.parse(discovery.body)).toMatchObject({ issuer: gateway.issuer })
    const grant = await call({
      ':method': 'POST', ':path': '/token', 'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from('svc:svc-secret-0123456789abcdef').toString('base64')}`,
    }, 'grant_type=client_credentials&scope=read')
    expect(grant.status).toBe(200)
    const { access_token: token } = JSON.parse(grant.body) as { access_token: string }
    const api = await call({ ':path': '/api/orders/1', authorization: `Bearer ${token}` })
    expect(api.status).toBe(200)
    expect(JSON.parse(api.body)).toMatchObject({ path: '/api/orders/1' })
  })
})

