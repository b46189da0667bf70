/**
 * Issue 22, OpenTelemetry traces with a real collector side: an OTLP/HTTP receiver here decodes what the
 * gateway exports and checks the spans and their parents for a forwarded request (the client's traceparent
 * continued, the upstream given the upstream span's), a cache hit, a denied request, an introspection miss
 * and a token grant; and that no token, secret or subject is in any span.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { basic, postForm } from '../support/authserver.js'
import { startAuthServerGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startIntrospectionServer, type TestIntrospectionServer } from '../support/introspection.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startCollector, type Collector, type ExportedSpan } from '../support/otlp-collector.js'

const SVC = { client_id: 'svc', client_secret: 'svc-secret-0123456789abcdef' }
let collector: Collector
let upstream: RecordingUpstream
let issuer: TestIssuer
let idp: TestIntrospectionServer
let gateway: RunningGateway

beforeAll(async () => {
  [collector, upstream, issuer, idp] = await Promise.all([startCollector(), startRecordingUpstream(), startTestIssuer(), startIntrospectionServer()])
  // No cooldown between JWKS fetches: a token with a new kid makes its request fetch the keys again.
  const base = testConfig({ upstream, issuer, issuerExtra: { jwks_cooldown: '0s' } })
  gateway = await startAuthServerGateway({ clients: [{ ...SVC, grant_types: ['client_credentials'], scopes: ['read'] }] }, {
    ...base,
    issuers: [
      ...(base.issuers as unknown[]),
      { issuer: 'https://idp.example.com', audience: ['api'], introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, token_prefix: 'op_' } },
    ],
    routes: [{ id: 'api', path: '/api/**', upstream: 'main' }],
    tracing: { enabled: true, endpoint: collector.url, sample_ratio: 1, export_delay: '50ms', service_name: 'portcullis-test' },
    decision: { listen: '127.0.0.1:0' },
  })
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([collector.close(), upstream.close(), issuer.close(), idp.close()])
})

/** The spans of one trace, once its server span has arrived (spans of a trace are exported as they end). */
async function traceOf(traceId: string, count: number): Promise<ExportedSpan[]> {
  const deadline = Date.now() + 5000
  for (;;) {
    const spans = collector.spans.filter((span) => span.traceId === traceId)
    if (spans.length >= count || Date.now() > deadline) return spans
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const CLIENT_PARENT = '00f067aa0ba902b7'

describe('spans exported over OTLP/HTTP', () => {
  it('a forwarded request: server span under the client\'s, authenticate (with the JWKS fetch) and the upstream call under it; the upstream continues the trace', async () => {
    // The keys fetched at start are in; then a key the gateway has not seen: this request's authentication fetches the JWKS.
    expect((await fetch(`${gateway.url}/api/warm`, { headers: { authorization: `Bearer ${await issuer.sign({ scope: 'read' })}` } })).status).toBe(200)
    upstream.requests.length = 0
    const key = await issuer.rotate('ES256')
    const token = await issuer.sign({ scope: 'read', sub: 'alice-subject' }, { key })
    const res = await fetch(`${gateway.url}/api/orders/1?secret=query`, {
      headers: { authorization: `Bearer ${token}`, traceparent: `00-${CLIENT_TRACE}-${CLIENT_PARENT}-01`, tracestate: 'vendor=1' },
    })
    expect(res.status).toBe(200)
    const spans = await traceOf(CLIENT_TRACE, 4)
    const server = spans.find((span) => span.kind === 2)!
    expect(server).toMatchObject({ name: 'GET /api/**', parentSpanId: CLIENT_PARENT })
    expect(server.attributes).toMatchObject({ 'http.request.method': 'GET', 'http.route': '/api/**', 'url.path': '/api/orders/1', 'http.response.status_code': 200 })
    const authenticate = spans.find((span) => span.name === 'authenticate')!
    expect(authenticate.parentSpanId).toBe(server.spanId)
    expect(authenticate.attributes['portcullis.cache.hit']).toBe(false)
    const jwks = spans.find((span) => span.attributes['portcullis.fetch'] === 'jwks')!
    expect([jwks.kind, jwks.parentSpanId, jwks.attributes['http.response.status_code']]).toEqual([3, authenticate.spanId, 200])
    const call = spans.find((span) => span.kind === 3 && span.attributes['portcullis.upstream'] === 'main')!
    expect([call.parentSpanId, call.attributes['http.response.status_code']]).toEqual([server.spanId, 200])
    expect(upstream.requests[0]!.headers.traceparent).toBe(`00-${CLIENT_TRACE}-${call.spanId}-01`)
    expect(upstream.requests[0]!.headers.tracestate).toBe('vendor=1')
    // One field of each: ours replaced the client's, and was not added beside it.
    const names = upstream.requests[0]!.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
    expect(names.filter((name) => name === 'traceparent' || name === 'tracestate')).toEqual(['traceparent', 'tracestate'])
    // Never a token, the query or the subject.
    const exported = collector.bodies.join('\n')
    for (const secret of [token.split('.')[2]!, 'secret=query', 'alice-subject']) expect(exported).not.toContain(secret)
  })

  it('a cache hit: authenticate answers at once (portcullis.cache.hit true); the log line carries the trace id', async () => {
    const token = await issuer.sign({ scope: 'read' })
    await fetch(`${gateway.url}/api/a`, { headers: { authorization: `Bearer ${token}` } })
    gateway.logs.length = 0
    const trace = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'
    await fetch(`${gateway.url}/api/a`, { headers: { authorization: `Bearer ${token}`, traceparent: `00-${trace}-bbbbbbbbbbbbbbbb-01` } })
    const spans = await traceOf(trace, 3)
    expect(spans.find((span) => span.name === 'authenticate')!.attributes['portcullis.cache.hit']).toBe(true)
    expect(spans.some((span) => span.attributes['portcullis.fetch'] === 'jwks')).toBe(false)
    // The log line is written when the response has closed, which may be just after the client has it.
    for (let i = 0; i < 40 && !gateway.logs.some((line) => line.includes(`"trace_id":"${trace}"`)); i++) await new Promise((resolve) => setTimeout(resolve, 25))
    expect(gateway.logs.some((line) => line.includes(`"trace_id":"${trace}"`))).toBe(true)
  })

  it('a decision is one trace: its server span continues the proxy\'s traceparent, authenticate under it, no orphan root', async () => {
    const token = await issuer.sign({ scope: 'read' })
    const trace = '0123456789abcdef0123456789abcdef'
    const before = collector.spans.length
    const res = await fetch(`${gateway.decisionUrl!}/decide`, {
      headers: { 'x-original-method': 'POST', 'x-original-uri': '/api/orders', authorization: `Bearer ${token}`, traceparent: `00-${trace}-ffffffffffffffff-01` },
    })
    expect(res.status).toBe(200)
    const spans = await traceOf(trace, 2)
    const server = spans.find((span) => span.kind === 2)!
    expect(server).toMatchObject({ name: 'POST /api/**', parentSpanId: 'ffffffffffffffff' })
    expect(server.attributes).toMatchObject({ 'portcullis.mode': 'decision', 'portcullis.decision': 'allowed', 'http.response.status_code': 200 })
    expect(spans.find((span) => span.name === 'authenticate')!.parentSpanId).toBe(server.spanId)
    // Nothing of this decision in another trace (the authenticate span used to be a root of its own).
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(collector.spans.slice(before).filter((span) => span.traceId !== trace)).toEqual([])
    // Without a traceparent: one new trace, the authentication inside it.
    const alone = await fetch(`${gateway.decisionUrl!}/decide`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/api/x', authorization: `Bearer ${token}` } })
    expect(alone.status).toBe(200)
    await new Promise((resolve) => setTimeout(resolve, 300))
    const root = collector.spans.filter((span) => span.kind === 2 && span.attributes['portcullis.mode'] === 'decision' && span.traceId !== trace).at(-1)!
    expect(collector.spans.filter((span) => span.name === 'authenticate' && span.traceId === root.traceId).map((span) => span.parentSpanId)).toEqual([root.spanId])
  })

  it('a denied request: the server span with 401 and its error type, no upstream call', async () => {
    const trace = 'cccccccccccccccccccccccccccccccc'
    const res = await fetch(`${gateway.url}/api/x`, { headers: { traceparent: `00-${trace}-dddddddddddddddd-01` } })
    expect(res.status).toBe(401)
    const spans = await traceOf(trace, 1)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(collector.spans.filter((span) => span.traceId === trace)).toHaveLength(1)
    expect(spans[0]!.attributes).toMatchObject({ 'http.response.status_code': 401, 'error.type': 'unauthorized', 'portcullis.decision': 'denied' })
  })

  it('an introspection miss: the POST to the endpoint under authenticate, the endpoint never the token', async () => {
    idp.answers.set('op_traced', { json: { active: true, iss: 'https://idp.example.com', aud: 'api', scope: 'read' } })
    const trace = 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee'
    expect((await fetch(`${gateway.url}/api/i`, { headers: { authorization: 'Bearer op_traced', traceparent: `00-${trace}-ffffffffffffffff-01` } })).status).toBe(200)
    const spans = await traceOf(trace, 4)
    const authenticate = spans.find((span) => span.name === 'authenticate')!
    const introspection = spans.find((span) => span.attributes['portcullis.fetch'] === 'introspection')!
    expect([introspection.name, introspection.parentSpanId, introspection.attributes['url.full']]).toEqual(['POST', authenticate.spanId, idp.endpoint])
    expect(collector.bodies.join('\n')).not.toContain('op_traced')
  })

  it('a token grant: a server span named by its grant type, no secret in it', async () => {
    const trace = '11111111111111111111111111111111'
    const res = await postForm(gateway, '/token', { grant_type: 'client_credentials', scope: 'read' },
      { authorization: basic(SVC.client_id, SVC.client_secret), traceparent: `00-${trace}-2222222222222222-01` })
    expect(res.status).toBe(200)
    const [grant] = await traceOf(trace, 1)
    expect(grant!.name).toBe('POST /token client_credentials')
    expect(grant!.attributes).toMatchObject({ 'portcullis.grant_type': 'client_credentials', 'http.response.status_code': 200 })
    const exported = collector.bodies.join('\n')
    expect(exported).not.toContain(SVC.client_secret)
    expect(exported).not.toContain(res.body.access_token as string)
  })
})
