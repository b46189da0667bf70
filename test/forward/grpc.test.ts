/**
 * gRPC through the gateway, with @grpc/grpc-js on both sides: the client over cleartext HTTP/2 (h2c, prior
 * knowledge) or TLS (h2 by ALPN, call credentials), the service over h2c. A refusal is a gRPC status as the
 * client library reports it, and never reaches the service.
 */
import net from 'node:net'
import { describe, expect, it, type TestContext } from 'vitest'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { closedPort } from '../support/upstream.js'
import { createTestCa } from '../support/tls.js'
import { startCollector } from '../support/otlp-collector.js'
import { echoClient, grpc, startGrpcUpstream, unary, type GrpcUpstream, type Note } from '../support/grpc.js'

interface Setup {
  service: GrpcUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  /** An Echo client of the gateway over h2c. */
  client: ReturnType<typeof echoClient>
  /** Call metadata with `Authorization: Bearer` for a token with these scopes (and claims). */
  bearer(scope: string, claims?: Record<string, unknown>): Promise<grpc.Metadata>
}

const ROUTES = [
  { id: 'health', path: '/grpc.health.v1.Health/Check', upstream: 'main', auth: 'none' },
  { id: 'echo', path: '/portcullis.test.Echo/*', upstream: 'main', scopes: { all: ['echo:call'] } },
  { id: 'admin', path: '/portcullis.test.Echo/Admin', upstream: 'main', scopes: { all: ['echo:admin'] } },
]

async function setup(onTestFinished: TestContext['onTestFinished'],
  options: { upstreamUrl?: string; upstreamExtra?: Record<string, unknown>; extra?: Record<string, unknown> } = {}): Promise<Setup> {
  const [service, issuer] = await Promise.all([startGrpcUpstream({ intervalMs: 20 }), startTestIssuer()])
  const config = testConfig({
    upstream: { url: options.upstreamUrl ?? service.url },
    upstreamExtra: { http2: true, ...options.upstreamExtra },
    issuer,
    routes: ROUTES,
    server: { http2: { cleartext: true } },
  })
  const gateway = await startGateway({ ...config, ...options.extra })
  const client = echoClient(`127.0.0.1:${gateway.port}`, grpc.credentials.createInsecure())
  onTestFinished(async () => {
    client.close()
    await gateway.close()
    await Promise.all([service.close(), issuer.close()])
  })
  return {
    service, issuer, gateway, client,
    bearer: async (scope, claims = {}) => {
      const metadata = new grpc.Metadata()
      metadata.set('authorization', `Bearer ${await issuer.sign({ scope, sub: 'alice', ...claims })}`)
      return metadata
    },
  }
}

const collect = <T>(stream: NodeJS.ReadableStream): Promise<{ messages: T[]; error?: grpc.ServiceError }> => new Promise((resolve) => {
  const messages: T[] = []
  stream.on('data', (message: T) => messages.push(message))
  stream.on('error', (error: grpc.ServiceError) => resolve({ messages, error }))
  stream.on('end', () => resolve({ messages }))
})

describe('gRPC over cleartext HTTP/2 to a gRPC service', () => {
  it('a unary call with a token of its scope reaches the service with the identity in its metadata', async ({ onTestFinished }) => {
    const { client, service, bearer } = await setup(onTestFinished)
    const metadata = await bearer('echo:call')
    const { note, error } = await unary((done) => client.Unary({ text: 'hi' }, metadata, done))
    expect(error).toBeUndefined()
    expect(note).toEqual({ text: 'echo: hi' })
    expect(service.calls).toHaveLength(1)
    expect(service.calls[0]!.metadata['x-auth-subject']).toBe('alice')
  })

  it('the log line and the metrics name the protocol, the method and the gRPC status, the service\'s or the refusal\'s', async ({ onTestFinished }) => {
    const { client, bearer, gateway } = await setup(onTestFinished)
    const metadata = await bearer('echo:call')
    await unary((done) => client.Unary({ text: 'hi' }, metadata, done))
    await unary((done) => client.Admin({ text: 'hi' }, metadata, done))
    const lines = gateway.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.route !== undefined)
    expect(lines.map(({ protocol, grpc_method, grpc_status, status }) => ({ protocol, grpc_method, grpc_status, status }))).toEqual([
      { protocol: 'h2', grpc_method: '/portcullis.test.Echo/Unary', grpc_status: 0, status: 200 },
      { protocol: 'h2', grpc_method: '/portcullis.test.Echo/Admin', grpc_status: 7, status: 200 },
    ])
    const text = await gateway.app.metrics.registry.metrics()
    expect(text).toContain('portcullis_grpc_calls_total{route="echo",grpc_status="0"} 1')
    expect(text).toContain('portcullis_grpc_calls_total{route="admin",grpc_status="7"} 1')
    expect(text).toMatch(/portcullis_requests_total\{route="admin",method="POST",status="200",decision="denied",reason="insufficient_scope",protocol="h2"\} 1/)
  })

  it('no token: UNAUTHENTICATED with the challenge in its metadata, and the service never called', async ({ onTestFinished }) => {
    const { client, service } = await setup(onTestFinished)
    const { error } = await unary((done) => client.Unary({ text: 'hi' }, new grpc.Metadata(), done))
    expect(error?.code).toBe(grpc.status.UNAUTHENTICATED)
    expect(error?.metadata.get('www-authenticate')).toEqual(['Bearer realm="test"'])
    expect(service.calls).toHaveLength(0)
  })

  it('a forged token: UNAUTHENTICATED naming invalid_token; the service never called', async ({ onTestFinished }) => {
    const { client, service } = await setup(onTestFinished)
    const metadata = new grpc.Metadata()
    metadata.set('authorization', 'Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.c2ln')
    const { error } = await unary((done) => client.Unary({ text: 'hi' }, metadata, done))
    expect(error?.code).toBe(grpc.status.UNAUTHENTICATED)
    expect(error?.details).toMatch(/^invalid_token: /)
    expect(String(error?.metadata.get('www-authenticate')[0])).toMatch(/error="invalid_token"/)
    expect(service.calls).toHaveLength(0)
  })

  it('a method whose route asks for a scope the token lacks: PERMISSION_DENIED; the service never called', async ({ onTestFinished }) => {
    const { client, service, bearer } = await setup(onTestFinished)
    const metadata = await bearer('echo:call')
    const { error } = await unary((done) => client.Admin({ text: 'hi' }, metadata, done))
    expect(error?.code).toBe(grpc.status.PERMISSION_DENIED)
    expect(String(error?.metadata.get('www-authenticate')[0])).toMatch(/error="insufficient_scope".*scope="echo:admin"/)
    expect(service.calls).toHaveLength(0)
    const admin = await unary(async (done) => client.Admin({ text: 'hi' }, await bearer('echo:call echo:admin'), done))
    expect(admin.note).toEqual({ text: 'admin: hi' })
  })

  it('past a rate limit: RESOURCE_EXHAUSTED with Retry-After; the service called only for the admitted one', async ({ onTestFinished }) => {
    const { client, service, bearer } = await setup(onTestFinished, { extra: {
      routes: [{ ...ROUTES[1], rate_limits: ['one'] }],
      rate_limits: { policies: { one: { limit: 1, window: '1m', key: 'sub' } } },
    } })
    const metadata = await bearer('echo:call')
    expect((await unary((done) => client.Unary({ text: '1' }, metadata, done))).note).toEqual({ text: 'echo: 1' })
    const { error } = await unary((done) => client.Unary({ text: '2' }, metadata, done))
    expect(error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED)
    expect(Number(error?.metadata.get('retry-after')[0])).toBeGreaterThan(0)
    expect(service.calls).toHaveLength(1)
  })

  it('the service down: UNAVAILABLE', async ({ onTestFinished }) => {
    const { client, bearer } = await setup(onTestFinished, { upstreamUrl: `http://127.0.0.1:${await closedPort()}` })
    const metadata = await bearer('echo:call')
    const { error } = await unary((done) => client.Unary({ text: 'hi' }, metadata, done))
    expect(error?.code).toBe(grpc.status.UNAVAILABLE)
    expect(error?.details).toMatch(/^bad_gateway: /)
  })

  it('an unknown method (no route): UNIMPLEMENTED', async ({ onTestFinished }) => {
    const { service, gateway, bearer } = await setup(onTestFinished, { extra: { routes: [ROUTES[2]] } })
    const client = echoClient(`127.0.0.1:${gateway.port}`, grpc.credentials.createInsecure())
    onTestFinished(() => client.close())
    const metadata = await bearer('echo:call')
    const { error } = await unary((done) => client.Unary({ text: 'hi' }, metadata, done))
    expect(error?.code).toBe(grpc.status.UNIMPLEMENTED)
    expect(service.calls).toHaveLength(0)
  })

  it('streams each way: server streaming, client streaming and bidirectional, the token checked once at the start', async ({ onTestFinished }) => {
    const { client, service, bearer } = await setup(onTestFinished)
    const metadata = await bearer('echo:call')
    const countdown = await collect<Note>(client.Countdown({ text: '5' }, metadata))
    expect(countdown).toEqual({ messages: ['5', '4', '3', '2', '1'].map((text) => ({ text })) })

    const collected = await new Promise<Note | grpc.ServiceError>((resolve) => {
      const call = client.Collect(metadata, (error, note) => resolve(error ?? note!))
      for (const text of ['a', 'b', 'c']) call.write({ text })
      call.end()
    })
    expect(collected).toEqual({ text: 'a+b+c' })

    // Each message answered before the next is sent: nothing on the way may wait for more of the body.
    const chat = client.Chat(metadata)
    const answers: string[] = []
    for (const text of ['one', 'two', 'three']) {
      chat.write({ text })
      answers.push(await new Promise<string>((resolve) => chat.once('data', (note: Note) => resolve(note.text))))
    }
    chat.end()
    await new Promise((resolve) => chat.on('status', resolve))
    expect(answers).toEqual(['re: one', 're: two', 're: three'])
    expect(service.calls.map((call) => call.method)).toEqual(['Countdown', 'Collect', 'Chat'])
  })

  it('a token that expires while its stream runs does not cut the stream', async ({ onTestFinished }) => {
    const { client, issuer } = await setup(onTestFinished)
    const metadata = new grpc.Metadata()
    const exp = Math.floor(Date.now() / 1000) + 2
    metadata.set('authorization', `Bearer ${await issuer.sign({ scope: 'echo:call', sub: 'alice', exp })}`)
    const started = Date.now()
    // 60 messages 50 ms apart: the call outlives the token by a second or more.
    const slow = await startGrpcUpstream({ intervalMs: 50 })
    onTestFinished(() => slow.close())
    const gateway = await startGateway(testConfig({
      upstream: { url: slow.url }, upstreamExtra: { http2: true }, issuer, routes: ROUTES, server: { http2: { cleartext: true } },
    }))
    onTestFinished(() => gateway.close())
    const viaSlow = echoClient(`127.0.0.1:${gateway.port}`, grpc.credentials.createInsecure())
    onTestFinished(() => viaSlow.close())
    const { messages, error } = await collect<Note>(viaSlow.Countdown({ text: '60' }, metadata))
    expect(error).toBeUndefined()
    expect(messages).toHaveLength(60)
    expect(Date.now()).toBeGreaterThan(exp * 1000)
    expect(Date.now() - started).toBeGreaterThan(2000)
    void client
  })

  it('the health check exempted by its own route: answered without a token', async ({ onTestFinished }) => {
    const { gateway, service } = await setup(onTestFinished)
    // grpc.health.v1.Health/Check, as a load balancer's probe sends it, through the gateway to a service without it.
    const health = new grpc.Client(`127.0.0.1:${gateway.port}`, grpc.credentials.createInsecure())
    onTestFinished(() => health.close())
    const status = await new Promise<grpc.ServiceError | null>((resolve) => {
      health.makeUnaryRequest('/grpc.health.v1.Health/Check', (value: Buffer) => value, (value: Buffer) => value, Buffer.alloc(0),
        new grpc.Metadata(), (error) => resolve(error))
    })
    // The service does not implement it: its UNIMPLEMENTED, not the gateway's UNAUTHENTICATED, came back.
    expect(status?.code).toBe(grpc.status.UNIMPLEMENTED)
    expect(status?.details).not.toMatch(/unauthorized|invalid_token/)
    expect(service.calls).toHaveLength(0)
  })
})

describe('to a gRPC service over TLS', () => {
  it('h2 by ALPN to an https upstream whose certificate chains to ca_file: the call is answered; an unknown CA is UNAVAILABLE', async ({ onTestFinished }) => {
    const ca = createTestCa()
    onTestFinished(() => ca.remove())
    const cert = ca.issue('service', ['IP:127.0.0.1'])
    const tlsService = await startGrpcUpstream({
      credentials: grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(cert.key), cert_chain: Buffer.from(cert.cert) }], false),
    })
    onTestFinished(() => tlsService.close())
    expect(tlsService.url).toMatch(/^https:/)
    const { client, bearer } = await setup(onTestFinished, { upstreamUrl: tlsService.url, upstreamExtra: { ca_file: ca.caFile } })
    const metadata = await bearer('echo:call')
    expect((await unary((done) => client.Unary({ text: 'over tls' }, metadata, done))).note).toEqual({ text: 'echo: over tls' })
    expect(tlsService.calls.map((call) => call.method)).toEqual(['Unary'])
    // Certificate verification stays on: without the private CA the service is not trusted, and nothing is sent.
    const untrusted = await setup(onTestFinished, { upstreamUrl: tlsService.url })
    const refused = await unary(async (done) => untrusted.client.Unary({ text: 'x' }, await untrusted.bearer('echo:call'), done))
    expect(refused.error?.code).toBe(grpc.status.UNAVAILABLE)
    expect(tlsService.calls).toHaveLength(1)
  })
})

describe('gRPC in a trace', () => {
  it('the call\'s server span carries OpenTelemetry\'s rpc.* attributes and the HTTP/2 protocol version', async ({ onTestFinished }) => {
    const collector = await startCollector()
    onTestFinished(() => collector.close())
    const { client, bearer } = await setup(onTestFinished, { extra: {
      tracing: { enabled: true, endpoint: collector.url, sample_ratio: 1, export_delay: '50ms', service_name: 'portcullis-test' },
    } })
    const metadata = await bearer('echo:call')
    await unary((done) => client.Admin({ text: 'hi' }, metadata, done))
    const deadline = Date.now() + 5000
    while (!collector.spans.some((span) => span.kind === 2) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
    const server = collector.spans.find((span) => span.kind === 2)
    expect(server?.attributes).toMatchObject({
      'rpc.system': 'grpc', 'rpc.service': 'portcullis.test.Echo', 'rpc.method': 'Admin', 'rpc.grpc.status_code': 7,
      'network.protocol.version': '2', 'http.route': '/portcullis.test.Echo/Admin',
    })
  })
})

describe('gRPC over TLS (h2 by ALPN) with call credentials', () => {
  it('the token from call credentials is checked as any Bearer token: unary and streams allowed, UNAUTHENTICATED without it, PERMISSION_DENIED past its scopes', async ({ onTestFinished }) => {
    const ca = createTestCa()
    onTestFinished(() => ca.remove())
    const cert = ca.issue('gateway', ['DNS:localhost', 'IP:127.0.0.1'])
    const [service, issuer] = await Promise.all([startGrpcUpstream(), startTestIssuer()])
    onTestFinished(async () => { await Promise.all([service.close(), issuer.close()]) })
    const gateway = await startGateway(testConfig({
      upstream: { url: service.url }, upstreamExtra: { http2: true }, issuer, routes: ROUTES,
      server: { tls: { cert_file: cert.certFile, key_file: cert.keyFile } },
    }))
    onTestFinished(() => gateway.close())
    const token = await issuer.sign({ scope: 'echo:call', sub: 'alice' })
    const callCredentials = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
      const metadata = new grpc.Metadata()
      metadata.set('authorization', `Bearer ${token}`)
      callback(null, metadata)
    })
    const tls = grpc.credentials.createSsl(Buffer.from(ca.ca))
    const client = echoClient(`localhost:${gateway.port}`, grpc.credentials.combineChannelCredentials(tls, callCredentials))
    const anonymous = echoClient(`localhost:${gateway.port}`, tls)
    onTestFinished(() => { client.close(); anonymous.close() })
    expect((await unary((done) => client.Unary({ text: 'tls' }, new grpc.Metadata(), done))).note).toEqual({ text: 'echo: tls' })
    expect((await unary((done) => anonymous.Unary({ text: 'tls' }, new grpc.Metadata(), done))).error?.code).toBe(grpc.status.UNAUTHENTICATED)
    expect((await unary((done) => client.Admin({ text: 'tls' }, new grpc.Metadata(), done))).error?.code).toBe(grpc.status.PERMISSION_DENIED)
    // Streams with the call credentials' token: server streaming and bidirectional.
    expect(await collect<Note>(client.Countdown({ text: '3' }, new grpc.Metadata()))).toEqual({ messages: [{ text: '3' }, { text: '2' }, { text: '1' }] })
    const chat = client.Chat(new grpc.Metadata())
    const answer = new Promise<string>((resolve) => chat.once('data', (note: Note) => resolve(note.text)))
    chat.write({ text: 'over tls' })
    expect(await answer).toBe('re: over tls')
    chat.end()
    await new Promise((resolve) => chat.on('status', resolve))
    expect(service.calls.map((call) => call.method)).toEqual(['Unary', 'Countdown', 'Chat'])
    expect(service.calls.every((call) => call.metadata['x-auth-subject'] !== undefined)).toBe(true)
  })

  it('an HTTP/1.1 request saying application/grpc is no gRPC call: its body to the HTTP/2 upstream is watched (408), its refusal plain HTTP', async ({ onTestFinished }) => {
    const { service, gateway } = await setup(onTestFinished, { extra: { server: { http2: { cleartext: true }, body_timeout: '1s' } } })
    const socket = net.connect({ port: gateway.port, host: '127.0.0.1' })
    onTestFinished(() => { socket.destroy() })
    const answer = new Promise<string>((resolve) => {
      let text = ''
      socket.setEncoding('latin1')
      socket.on('data', (chunk: string) => { text += chunk; if (text.includes('\r\n\r\n')) resolve(text) })
      socket.on('close', () => resolve(text))
    })
    socket.on('connect', () => {
      socket.write('POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: gw\r\nContent-Type: application/grpc\r\nTE: trailers\r\nContent-Length: 1000\r\n\r\nx')
    })
    const head = await answer
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout')
    expect(head.toLowerCase()).not.toContain('grpc-status')
    expect(service.calls).toHaveLength(0)
  })
})
