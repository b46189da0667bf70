/**
 * MCP in the decision mode: a POST on an `mcp` route is decided from its `Mcp-Method` and `Mcp-Name` headers
 * (MCP 2026-07-28, Standard Request Headers) with the route's and the tool's rules, as the proxy mode decides it
 * from the body; without `Mcp-Method` it is a 400 that says what to do instead, never a 500; the header checks
 * the proxy mode makes hold here (one value each, a method spelled exactly, the Base64 name form); an MCP
 * decision is never cacheable (the proxy's cache key holds neither header). The decision endpoint forwards
 * nothing: the recording upstream must see no request at all. Through real nginx: test/decision/proxies.test.ts.
 */
import http from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { decisionWarnings } from '../../src/decision/lint.js'
import { stringify } from 'yaml'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const ROUTES = [
  {
    id: 'mcp', path: '/mcp', upstream: 'main', scopes: { all: ['mcp:use'] },
    mcp: { tools: { delete_order: { scopes: { all: ['orders:write'] } }, '*': { scopes: { all: ['mcp:use'] } } } },
  },
]

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway
let decide: string

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway({ ...testConfig({ upstream, issuer, routes: ROUTES }), decision: { listen: '127.0.0.1:0' } })
  decide = `${gateway.decisionUrl!}/decide`
})
afterAll(async () => {
  expect(upstream.requests).toHaveLength(0)
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

const token = (scope: string) => issuer.sign({ scope })

/**
 * nginx's `auth_request` subrequest describing `method /mcp` with the client's headers; a header given as a list is
 * sent as that many fields (fetch would join them into one).
 */
function decideMcp(headers: Record<string, string | string[]>, method = 'POST'): Promise<Response> {
  const raw = ['host', new URL(decide).host, 'x-original-method', method, 'x-original-uri', '/mcp']
  for (const [name, value] of Object.entries(headers)) for (const one of [value].flat()) raw.push(name, one)
  return new Promise((resolve, reject) => {
    http.get(decide, { headers: raw }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => {
        const fields = new Headers()
        for (const [name, value] of Object.entries(res.headers)) for (const one of [value ?? []].flat()) fields.append(name, one)
        resolve(new Response(Buffer.concat(chunks), { status: res.statusCode!, headers: fields }))
      })
    }).on('error', reject)
  })
}

async function refusal(response: Response) {
  const body = await response.json() as { error: string; error_description: string }
  return { status: response.status, error: body.error, description: body.error_description, challenge: response.headers.get('www-authenticate') }
}

describe('an MCP message decided from its headers', () => {
  it('allows a tool call the token holds the tool\'s scopes for, with the identity headers, never cacheable', async () => {
    const response = await decideMcp({ authorization: `Bearer ${await token('mcp:use orders:write')}`, 'mcp-method': 'tools/call', 'mcp-name': 'delete_order' })
    expect(response.status).toBe(200)
    expect(response.headers.get('x-auth-scopes')).toBe('mcp:use orders:write')
    expect(response.headers.get('cache-control')).toBe('no-store')
    expect(response.headers.get('x-accel-expires')).toBeNull()
  })

  it('refuses a tool call short of the tool\'s scope: one 403 naming the route\'s and the tool\'s scopes', async () => {
    const response = await decideMcp({ authorization: `Bearer ${await token('mcp:use')}`, 'mcp-method': 'tools/call', 'mcp-name': 'delete_order' })
    expect(response.status).toBe(403)
    expect(response.headers.get('www-authenticate')).toContain('error="insufficient_scope"')
    expect(response.headers.get('www-authenticate')).toContain('scope="mcp:use orders:write"')
    // Another tool, under "*": the route's scope suffices.
    const other = await decideMcp({ authorization: `Bearer ${await token('mcp:use')}`, 'mcp-method': 'tools/call', 'mcp-name': 'list_orders' })
    expect(other.status).toBe(200)
  })

  it('reads Mcp-Name in the Base64 form (MCP "Value Encoding"): a tool named that way gets its own rules', async () => {
    const encoded = `=?base64?${Buffer.from('delete_order').toString('base64')}?=`
    const response = await decideMcp({ authorization: `Bearer ${await token('mcp:use')}`, 'mcp-method': 'tools/call', 'mcp-name': encoded })
    expect(response.status).toBe(403)
    expect(response.headers.get('www-authenticate')).toContain('scope="mcp:use orders:write"')
  })

  it('without Mcp-Method: 400 invalid_request whose description says to use a newer client or the proxy mode, in the body and the challenge', async () => {
    const seen = await refusal(await decideMcp({ authorization: `Bearer ${await token('mcp:use orders:write')}` }))
    expect(seen.status).toBe(400)
    expect(seen.error).toBe('invalid_request')
    expect(seen.description).toMatch(/Mcp-Method and Mcp-Name headers .*use a client that sends them, or serve this route through the proxy mode/)
    expect(seen.challenge).toMatch(/^Bearer realm="test", error="invalid_request", error_description="an MCP message is decided here from its Mcp-Method/)
  })

  it('a missing token is still 401 first, so that a client finds how to authenticate (its first message may lack the headers)', async () => {
    const response = await decideMcp({})
    expect(response.status).toBe(401)
    expect(response.headers.get('www-authenticate')).toBe('Bearer realm="test"')
  })

  it('refuses what the proxy mode refuses in the headers: a target missing, a header twice, a method spelled otherwise, a name without a method', async () => {
    const authorization = `Bearer ${await token('mcp:use orders:write')}`
    const cases: Array<[Record<string, string | string[]>, RegExp]> = [
      [{ 'mcp-method': 'tools/call' }, /Mcp-Name header is required with Mcp-Method: tools\/call/],
      [{ 'mcp-method': 'tools/call', 'mcp-name': ['list_orders', 'delete_order'] }, /Mcp-Name header is sent more than once/],
      [{ 'mcp-method': 'TOOLS/CALL', 'mcp-name': 'delete_order' }, /case-sensitive/],
      [{ 'mcp-name': 'delete_order' }, /Mcp-Name header needs an Mcp-Method header/],
      [{ 'mcp-method': 'tools/call', 'mcp-name': '=?base64?not base64!?=' }, /not valid Base64/],
    ]
    for (const [headers, description] of cases) {
      const seen = await refusal(await decideMcp({ authorization, ...headers }))
      expect(seen.status, JSON.stringify(headers)).toBe(400)
      expect(seen.description, JSON.stringify(headers)).toMatch(description)
    }
  })

  it('a foreign Origin is refused (DNS rebinding), as in the proxy mode; a GET (the event stream) is decided by the route\'s rules', async () => {
    const authorization = `Bearer ${await token('mcp:use')}`
    const foreign = await decideMcp({ authorization, origin: 'https://evil.example', 'mcp-method': 'tools/list' })
    expect(foreign.status).toBe(403)
    expect((await refusal(foreign)).error).toBe('access_denied')
    expect((await decideMcp({ authorization }, 'GET')).status).toBe(200)
    expect((await decideMcp({ authorization: `Bearer ${await token('other')}` }, 'GET')).status).toBe(403)
  })
})

describe('at start', () => {
  it('warns, for each mcp route, that the MCP server behind must refuse a body that disagrees with the headers', () => {
    const config = loadConfig('portcullis.yaml', stringify({ ...testConfig({ upstream, issuer, routes: ROUTES }), decision: { listen: '127.0.0.1:0' } }), {})
    const warnings = decisionWarnings(config).filter((warning) => warning.startsWith('routes mcp:'))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatch(/Mcp-Method and Mcp-Name headers, never the body: the MCP server behind must refuse a body that disagrees with them \(MCP 2026-07-28, Server Validation\)/)
  })
})
