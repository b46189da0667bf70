/**
 * `forward.max_identity_header_size`: the identity and claim headers of one request together are bounded. An
 * introspection answer with 5,000 groups copied into `X-Groups` (about 45 KB) is refused with 401
 * invalid_token in proxy mode and at the decision endpoint, logged with its size, and never reaches the
 * upstream; a token under the bound is forwarded whole; the bound is configurable.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway, type RunningGateway } from '../support/gateway.js'
import { startIntrospectionServer, type TestIntrospectionServer } from '../support/introspection.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const ISSUER = 'https://idp.example/realms/acme'
const groups = (count: number) => Array.from({ length: count }, (_, i) => `g${String(i).padStart(6, '0')}`)

let upstream: RecordingUpstream
let idp: TestIntrospectionServer
const gateways: RunningGateway[] = []

beforeAll(async () => {
  ;[upstream, idp] = await Promise.all([startRecordingUpstream(), startIntrospectionServer()])
  const answer = (count: number) => ({ active: true, iss: ISSUER, aud: 'orders-api', sub: 'alice', client_id: 'app', scope: 'orders:read', groups: groups(count) })
  idp.answerJson('kc_many_groups', answer(5000))
  idp.answerJson('kc_some_groups', answer(100))
  idp.answerJson('kc_near_bound', answer(930))
})
afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()))
  await Promise.all([upstream.close(), idp.close()])
})

async function start(forward: Record<string, unknown> = {}): Promise<RunningGateway> {
  const gateway = await startGateway({
    upstreams: { main: { url: upstream.url } },
    issuers: [{
      issuer: ISSUER, audience: ['orders-api'], claim_headers: { 'X-Groups': 'groups' },
      introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret, token_prefix: 'kc_' },
    }],
    routes: [{ id: 'orders', path: '/orders/**', upstream: 'main', scopes: { all: ['orders:read'] } }],
    forward,
    decision: { listen: '127.0.0.1:0' },
    log: { level: 'info' },
  })
  gateways.push(gateway)
  return gateway
}

async function call(gateway: RunningGateway, token: string) {
  const before = upstream.requests.length
  const response = await fetch(`${gateway.url}/orders/1`, { headers: { authorization: `Bearer ${token}` } })
  const body = await response.text()
  return { status: response.status, challenge: response.headers.get('www-authenticate'), body, reached: upstream.requests.length > before }
}

async function decide(gateway: RunningGateway, token: string) {
  const response = await fetch(`${gateway.decisionUrl!}/decide`, {
    headers: { 'x-original-method': 'GET', 'x-original-uri': '/orders/1', authorization: `Bearer ${token}` },
  })
  await response.arrayBuffer()
  return { status: response.status, groups: response.headers.get('x-groups') }
}

describe('forward.max_identity_header_size', () => {
  it('5,000 groups: 401 invalid_token, logged with the size, never forwarded (proxy mode and decision)', async () => {
    const gateway = await start()
    const refused = await call(gateway, 'kc_many_groups')
    expect(refused).toMatchObject({ status: 401, reached: false })
    expect(refused.challenge).toMatch(/error="invalid_token"/)
    expect(refused.body).not.toContain('g000001')
    expect((await decide(gateway, 'kc_many_groups')).status).toBe(401)
    const line = gateway.logs.find((entry) => entry.includes('identity_headers_too_large'))
    expect(line).toMatch(/identity_headers_too_large: \d{5} bytes, more than forward.max_identity_header_size \(8192\)/)
  })

  it('under the bound the claim header is forwarded whole', async () => {
    const gateway = await start()
    const forwarded = await call(gateway, 'kc_some_groups')
    expect(forwarded).toMatchObject({ status: 200, reached: true })
    expect(upstream.requests.at(-1)!.headers['x-groups']).toBe(groups(100).join(', '))
    expect((await decide(gateway, 'kc_some_groups'))).toEqual({ status: 200, groups: groups(100).join(', ') })
  })

  it('the bound is configurable both ways', async () => {
    // 930 groups make about 8.4 KB of X-Groups: over the default, under 16 KB.
    expect((await call(await start(), 'kc_near_bound')).status).toBe(401)
    const roomy = await start({ max_identity_header_size: '16kb' })
    expect(await call(roomy, 'kc_near_bound')).toMatchObject({ status: 200, reached: true })
    const tight = await start({ max_identity_header_size: '512b' })
    expect(await call(tight, 'kc_some_groups')).toMatchObject({ status: 401, reached: false })
  })
})
