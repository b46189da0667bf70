/**
 * Issue 19, per-tool authorization for an MCP server behind the gateway (MCP 2026-07-28, Streamable HTTP
 * "Request Metadata" and Authorization "Scope Challenge Handling"), end to end on a real gateway: rules by
 * tool, prompt and method, one step-up challenge naming the route's and the tool's scopes, `Mcp-Method` /
 * `Mcp-Name` checked against the JSON-RPC body, and what cannot be read one way only refused. Every refusal
 * asserts the answer and that nothing reached the upstream.
 */
import { createHash } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { runPortcullis } from '../../src/server/run.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { labelValues, scrape, valueOf } from '../support/prometheus.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { lineCollector } from '../support/logs.js'

const PUBLIC = 'https://mcp.example.com'
const RESOURCE = `${PUBLIC}/mcp`
const METADATA = `${PUBLIC}/.well-known/oauth-protected-resource/mcp`

const MCP_RULES = {
  tools: {
    delete_order: { scopes: { all: ['orders:write'] }, claims: { all: [{ claim: 'department', equals: 'sales' }] } },
    get_order: { scopes: { all: ['orders:read'] } },
    '*': { scopes: { all: ['tools:other'] } },
  },
  prompts: { summarize: { scopes: { any: ['prompts:use', 'prompts:admin'] } } },
  methods: { 'resources/read': { scopes: { all: ['resources:read'] } } },
}

function routes(mcp: Record<string, unknown> = MCP_RULES): Record<string, unknown>[] {
  return [
    { id: 'mcp', path: '/mcp', upstream: 'main', scopes: { all: ['mcp:use'] }, mcp },
    // No "*": a tool not listed gets the route's rules only.
    { id: 'listed', path: '/listed/mcp', upstream: 'main', mcp: { tools: { delete_order: { scopes: { all: ['orders:write'] } } } } },
    { id: 'optional', path: '/optional/mcp', upstream: 'main', auth: 'optional', mcp: { tools: { delete_order: { scopes: { all: ['orders:write'] } } } } },
    { id: 'small', path: '/small/mcp', upstream: 'main', max_body_size: '1kb', mcp: { tools: { '*': { scopes: { all: ['tools:other'] } } } } },
  ]
}

function config(upstream: RecordingUpstream, issuer: TestIssuer, mcp?: Record<string, unknown>): Record<string, unknown> {
  const base = testConfig({ upstream, issuer, routes: routes(mcp), server: { public_url: PUBLIC } })
  return { ...base, resources: [{ resource: RESOURCE, routes: ['mcp'] }] }
}

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway

beforeAll(async () => {
  [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway(config(upstream, issuer))
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

beforeEach(() => {
  upstream.requests.length = 0
  gateway.logs.length = 0
})

/** A token for the MCP resource (RFC 8707 `aud`) with these scopes and claims. */
function token(scope: string, claims: Record<string, unknown> = {}): Promise<string> {
  return issuer.sign({ aud: [issuer.audience, RESOURCE], scope, ...claims })
}

interface Message { jsonrpc?: string; id?: number; method?: string; params?: Record<string, unknown> }

const toolCall = (name: string, args: Record<string, unknown> = {}): Message =>
  ({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } })

/** The headers a 2026-07-28 client mirrors from `message`. */
function mirrored(message: Message): Record<string, string> {
  const name = message.params?.name ?? message.params?.uri
  return { 'mcp-method': message.method!, ...(typeof name === 'string' && { 'mcp-name': name }) }
}

function post(pathname: string, accessToken: string | undefined, body: string | Buffer | Message,
  headers: Record<string, string> = {}): Promise<Response> {
  const payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body)
  return fetch(`${gateway.url}${pathname}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28',
      ...(accessToken !== undefined && { authorization: `Bearer ${accessToken}` }), ...headers,
    },
    body: payload,
  })
}

/** A 2026-07-28 client: the message and the headers it mirrors. */
const send = (pathname: string, accessToken: string | undefined, message: Message) => post(pathname, accessToken, message, mirrored(message))

function deniedReasons(): unknown[] {
  return gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
}

const scopeChallenge = (scope: string) => 'Bearer realm="test", error="insufficient_scope", ' +
  `error_description="the access token lacks a required scope", scope="${scope}", resource_metadata="${METADATA}"`

async function expectInsufficientScope(res: Response, scope: string, reason: string): Promise<void> {
  expect(res.status).toBe(403)
  expect(res.headers.get('www-authenticate')).toBe(scopeChallenge(scope))
  expect(await res.json()).toEqual({ error: 'insufficient_scope', error_description: 'the access token lacks a required scope' })
  expect(upstream.requests).toHaveLength(0)
  expect(deniedReasons()).toEqual([reason])
}

/** 400 invalid_request without a Bearer challenge (not about the token), nothing forwarded, `reason` logged. */
async function expectRefused(res: Response, reason: string | RegExp): Promise<void> {
  expect(res.status).toBe(400)
  expect(res.headers.get('www-authenticate')).toBeNull()
  expect((await res.json() as { error: string }).error).toBe('invalid_request')
  expect(upstream.requests).toHaveLength(0)
  const reasons = deniedReasons()
  expect(reasons).toHaveLength(1)
  if (typeof reason === 'string') expect(reasons[0]).toBe(reason)
  else expect(reasons[0]).toMatch(reason)
}

const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex')

describe('tools/call', () => {
  it('forwards a call of an allowed tool with its body intact and its headers', async () => {
    const message = toolCall('get_order', { id: 'A-17', note: 'caf\u00e9 \u{1f600}' })
    const body = JSON.stringify(message)
    const res = await post('/mcp', await token('mcp:use orders:read'), body, mirrored(message))
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    const forwarded = upstream.requests[0]!
    expect(forwarded.method).toBe('POST')
    expect(forwarded.bodySha256).toBe(sha256(body))
    expect(forwarded.bodyBytes).toBe(Buffer.byteLength(body))
    expect(forwarded.headers['mcp-method']).toBe('tools/call')
    expect(forwarded.headers['mcp-name']).toBe('get_order')
  })

  it("answers one 403 naming the route's scopes and the tool's (the step-up a client follows); nothing forwarded", async () => {
    await expectInsufficientScope(await send('/mcp', await token('mcp:use orders:read'), toolCall('delete_order')),
      'mcp:use orders:write', 'mcp.tools.delete_order.scopes.all: missing orders:write')
  })

  it("names the tool's scopes even when the route's are missing too: one challenge, not two", async () => {
    await expectInsufficientScope(await send('/mcp', await token('orders:read'), toolCall('delete_order')),
      'mcp:use orders:write', 'scopes.all: missing mcp:use orders:write')
  })

  it("checks the tool's claim conditions after its scopes: 403 access_denied, no challenge", async () => {
    const res = await send('/mcp', await token('mcp:use orders:write', { department: 'support' }), toolCall('delete_order'))
    expect(res.status).toBe(403)
    expect(res.headers.get('www-authenticate')).toBeNull()
    expect(await res.json()).toEqual({ error: 'access_denied', error_description: 'the access token does not permit this request' })
    expect(upstream.requests).toHaveLength(0)
    expect(deniedReasons()).toEqual(['mcp.tools.delete_order.claims.all[0]: department equals "sales"'])
    expect((await send('/mcp', await token('mcp:use orders:write', { department: 'sales' }), toolCall('delete_order'))).status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it('applies "*" to a tool not listed, labelled mcp.tools.*', async () => {
    await expectInsufficientScope(await send('/mcp', await token('mcp:use'), toolCall('list_things')),
      'mcp:use tools:other', 'mcp.tools.*.scopes.all: missing tools:other')
    expect((await send('/mcp', await token('mcp:use tools:other'), toolCall('list_things'))).status).toBe(200)
  })

  it('without "*", forwards a tool not listed with the route\'s rules only', async () => {
    expect((await send('/listed/mcp', await token(''), toolCall('list_things'))).status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    upstream.requests.length = 0
    gateway.logs.length = 0
    await expectInsufficientScopePlain(await send('/listed/mcp', await token(''), toolCall('delete_order')), 'orders:write')
  })

  it('forwards a chunked message (no Content-Length) read whole, with its body intact', async () => {
    const message = toolCall('get_order', { id: 'A-18' })
    const text = JSON.stringify(message)
    const res = await fetch(`${gateway.url}/mcp`, {
      method: 'POST', duplex: 'half',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await token('mcp:use orders:read')}`, ...mirrored(message) },
      body: new ReadableStream({ start(controller) { controller.enqueue(new TextEncoder().encode(text)); controller.close() } }),
    } as RequestInit)
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.bodySha256).toBe(sha256(text))
  })

  it("still refuses a token issued for another resource (RFC 8707 aud) before reading the message: 401", async () => {
    const res = await send('/mcp', await issuer.sign({ aud: issuer.audience, scope: 'mcp:use orders:read' }), toolCall('get_order'))
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"')
    expect(res.headers.get('www-authenticate')).toContain(`resource_metadata="${METADATA}"`)
    expect(upstream.requests).toHaveLength(0)
  })

  it('applies the rules from the body when the client sends no Mcp-* headers (2025-11-25 and earlier)', async () => {
    await expectInsufficientScope(await post('/mcp', await token('mcp:use orders:read'), toolCall('delete_order')),
      'mcp:use orders:write', 'mcp.tools.delete_order.scopes.all: missing orders:write')
    expect((await post('/mcp', await token('mcp:use orders:read'), toolCall('get_order'))).status).toBe(200)
  })
})

/** A 403 insufficient_scope on a route that is not an RFC 9728 resource (no resource_metadata). */
async function expectInsufficientScopePlain(res: Response, scope: string): Promise<void> {
  expect(res.status).toBe(403)
  expect(res.headers.get('www-authenticate')).toBe(
    `Bearer realm="test", error="insufficient_scope", error_description="the access token lacks a required scope", scope="${scope}"`)
  expect(upstream.requests).toHaveLength(0)
}

describe('headers against the body', () => {
  it('refuses an Mcp-Name that names a harmless tool while the body calls a dangerous one', async () => {
    // The token may call get_order: a gateway trusting the header would forward delete_order.
    const res = await post('/mcp', await token('mcp:use orders:read'), toolCall('delete_order'), { 'mcp-method': 'tools/call', 'mcp-name': 'get_order' })
    await expectRefused(res, 'mcp: Mcp-Name "get_order", body "delete_order"')
  })

  it('refuses an Mcp-Method that disagrees with the body', async () => {
    const res = await post('/mcp', await token('mcp:use orders:read'), toolCall('get_order'), { 'mcp-method': 'tools/list', 'mcp-name': 'get_order' })
    await expectRefused(res, 'mcp: Mcp-Method "tools/list", body method "tools/call"')
  })

  it('refuses Mcp-Method: tools/call without Mcp-Name, and Mcp-Name without Mcp-Method', async () => {
    const accessToken = await token('mcp:use orders:read')
    await expectRefused(await post('/mcp', accessToken, toolCall('get_order'), { 'mcp-method': 'tools/call' }),
      'mcp: the Mcp-Name header is required with Mcp-Method: tools/call')
    gateway.logs.length = 0
    await expectRefused(await post('/mcp', accessToken, toolCall('get_order'), { 'mcp-name': 'get_order' }),
      'mcp: the Mcp-Name header needs an Mcp-Method header')
  })

  it('refuses an Mcp-Name on a method whose body names nothing', async () => {
    const res = await post('/mcp', await token('mcp:use'), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-method': 'tools/list', 'mcp-name': 'delete_order' })
    await expectRefused(res, 'mcp: Mcp-Name "delete_order", body none')
  })

  it('compares values exactly: an Mcp-Name in another case is a mismatch', async () => {
    const res = await post('/mcp', await token('mcp:use orders:read'), toolCall('get_order'), { 'mcp-method': 'tools/call', 'mcp-name': 'GET_ORDER' })
    await expectRefused(res, 'mcp: Mcp-Name "GET_ORDER", body "get_order"')
  })

  it('decodes the Base64 sentinel form of Mcp-Name before comparing (MCP "Value Encoding")', async () => {
    const name = 'r\u00e9sum\u00e9_order'
    const encoded = `=?base64?${Buffer.from(name).toString('base64')}?=`
    const ok = await post('/mcp', await token('mcp:use tools:other'), toolCall(name), { 'mcp-method': 'tools/call', 'mcp-name': encoded })
    expect(ok.status).toBe(200)
    upstream.requests.length = 0
    const other = `=?base64?${Buffer.from('get_order').toString('base64')}?=`
    await expectRefused(await post('/mcp', await token('mcp:use tools:other'), toolCall(name), { 'mcp-method': 'tools/call', 'mcp-name': other }),
      `mcp: Mcp-Name "get_order", body "${name}"`)
    gateway.logs.length = 0
    await expectRefused(await post('/mcp', await token('mcp:use tools:other'), toolCall(name), { 'mcp-method': 'tools/call', 'mcp-name': '=?base64?not base64!?=' }),
      'mcp: the Mcp-Name header is not valid Base64')
    gateway.logs.length = 0
    const latin1 = `=?base64?${Buffer.from('r\u00e9sum\u00e9_order', 'latin1').toString('base64')}?=`
    await expectRefused(await post('/mcp', await token('mcp:use tools:other'), toolCall(name), { 'mcp-method': 'tools/call', 'mcp-name': latin1 }),
      'mcp: the Mcp-Name header is not Base64 of UTF-8 text')
  })
})

describe('bodies the gateway cannot read one way only', () => {
  const reject = async (body: string | Buffer, reason: string | RegExp, headers: Record<string, string> = {}) => {
    gateway.logs.length = 0
    await expectRefused(await post('/mcp', await token('mcp:use orders:read tools:other'), body, headers), reason)
  }

  it('refuses a body that is not JSON, not UTF-8, or not sent as application/json', async () => {
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call",', 'mcp: body: expected a member name at character 47')
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order"}} x', 'mcp: body: text after the JSON value at character 78')
    await reject("{'jsonrpc':'2.0'}", 'mcp: body: expected a member name at character 2')
    await reject(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), 'mcp: the MCP message is not valid UTF-8')
    await reject(`\ufeff${JSON.stringify(toolCall('get_order'))}`, 'mcp: the MCP message starts with a byte order mark')
    await reject(JSON.stringify(toolCall('get_order')), 'mcp: content-type "text/plain"', { 'content-type': 'text/plain' })
    await reject(JSON.stringify(toolCall('get_order')), 'mcp: content-type "application/json; charset=iso-8859-1"',
      { 'content-type': 'application/json; charset=iso-8859-1' })
  })

  it('refuses a JSON-RPC batch, even of allowed calls (batching was removed in MCP 2025-06-18)', async () => {
    await reject(JSON.stringify([toolCall('get_order'), toolCall('delete_order')]),
      'mcp: JSON-RPC batches are not accepted: an MCP POST carries one message (batching was removed in MCP 2025-06-18)')
    await reject('[]', /batches are not accepted/)
  })

  it('refuses a member name given twice, however it is spelled (parsers keep the first or the last)', async () => {
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","name":"delete_order"}}',
      /^mcp: body: the member "name" twice at character/)
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","n\\u0061me":"delete_order"}}',
      /^mcp: body: the member "name" twice/)
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"get_order"}}',
      /^mcp: body: the member "method" twice/)
  })

  it('refuses lone surrogates and deep nesting', async () => {
    await reject('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order\\ud800"}}', /^mcp: body: a lone surrogate escape/)
    const deep = `${'['.repeat(200)}${']'.repeat(200)}`
    await reject(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","arguments":{"x":${deep}}}}`,
      /^mcp: body: nested deeper than 64/)
  })

  it('refuses what is not a JSON-RPC 2.0 request, notification or response', async () => {
    await reject('"tools/call"', 'mcp: the MCP message is not a JSON-RPC object')
    await reject(JSON.stringify({ id: 1, method: 'tools/call', params: { name: 'get_order' } }), 'mcp: the MCP message is not JSON-RPC 2.0')
    await reject(JSON.stringify({ jsonrpc: '2.0', id: 1 }), 'mcp: the MCP message is neither a JSON-RPC request, notification nor response')
    await reject(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: ['delete_order'] }),
      'mcp: the JSON-RPC params of an MCP message are an object')
    await reject(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: ['delete_order'] } }),
      'mcp: tools/call names its target in params.name, a string')
    await reject(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call' }), 'mcp: tools/call names its target in params.name, a string')
  })

  it('refuses a POST without a body, and a compressed one (an upstream that decoded it would read another message)', async () => {
    await reject('', 'mcp: no body')
    await reject(JSON.stringify(toolCall('get_order')), 'mcp: content-encoding "gzip"', { 'content-encoding': 'gzip' })
  })

  it('refuses a message sent by another method than POST (an upstream routing every method might run it)', async () => {
    const message = toolCall('delete_order')
    const res = await fetch(`${gateway.url}/mcp`, { method: 'PUT', body: JSON.stringify(message),
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await token('mcp:use')}`, ...mirrored(message) } })
    await expectRefused(res, 'mcp: a body on PUT')
  })

  it('refuses a body over server.body_buffer_size with 413 before reading it, and a chunked one once past it', async () => {
    const message = toolCall('get_order', { padding: 'x'.repeat(70 * 1024) })
    const accessToken = await token('mcp:use orders:read')
    const declared = await post('/mcp', accessToken, message, mirrored(message))
    expect(declared.status).toBe(413)
    expect(upstream.requests).toHaveLength(0)
    const text = JSON.stringify(message)
    const chunked = await fetch(`${gateway.url}/mcp`, {
      method: 'POST', duplex: 'half',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${accessToken}`, ...mirrored(message) },
      body: new ReadableStream({ start(controller) { controller.enqueue(new TextEncoder().encode(text)); controller.close() } }),
    } as RequestInit)
    expect(chunked.status).toBe(413)
    expect(upstream.requests).toHaveLength(0)
  })

  it("refuses a body over the route's max_body_size when that is the smaller bound", async () => {
    const message = toolCall('anything', { padding: 'x'.repeat(2048) })
    const res = await post('/small/mcp', await token('tools:other'), message, mirrored(message))
    expect(res.status).toBe(413)
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('methods and prompts', () => {
  const read = (uri: string): Message => ({ jsonrpc: '2.0', id: 2, method: 'resources/read', params: { uri } })

  it("applies a method's rule to resources/read, with Mcp-Name as the resource URI", async () => {
    await expectInsufficientScope(await send('/mcp', await token('mcp:use'), read('file:///projects/app/config.json')),
      'mcp:use resources:read', 'mcp.methods.resources/read.scopes.all: missing resources:read')
    const res = await send('/mcp', await token('mcp:use resources:read'), read('file:///projects/app/config.json'))
    expect(res.status).toBe(200)
    expect(upstream.requests[0]!.headers['mcp-name']).toBe('file:///projects/app/config.json')
  })

  it("names the held member of a prompt's scopes.any beside the route's, and the whole list when none is held", async () => {
    const prompt: Message = { jsonrpc: '2.0', id: 3, method: 'prompts/get', params: { name: 'summarize' } }
    await expectInsufficientScope(await send('/mcp', await token('prompts:admin'), prompt),
      'mcp:use prompts:admin', 'scopes.all: missing mcp:use')
    gateway.logs.length = 0
    await expectInsufficientScope(await send('/mcp', await token('mcp:use'), prompt),
      'mcp:use prompts:use prompts:admin', 'mcp.prompts.summarize.scopes.any: missing prompts:use prompts:admin')
    expect((await send('/mcp', await token('mcp:use prompts:admin'), prompt)).status).toBe(200)
  })

  it('forwards other methods, notifications and JSON-RPC responses with the route\'s rules', async () => {
    const accessToken = await token('mcp:use')
    expect((await send('/mcp', accessToken, { jsonrpc: '2.0', id: 4, method: 'tools/list' })).status).toBe(200)
    expect((await send('/mcp', accessToken, { jsonrpc: '2.0', method: 'notifications/initialized' })).status).toBe(200)
    // 2025-11-25: a client answers a server's request (sampling, elicitation) in a POST of its own.
    expect((await post('/mcp', accessToken, { jsonrpc: '2.0', id: 'srv-1', result: {} } as unknown as Message)).status).toBe(200)
    expect(upstream.requests).toHaveLength(3)
    upstream.requests.length = 0
    await expectInsufficientScope(await send('/mcp', await token(''), { jsonrpc: '2.0', id: 4, method: 'tools/list' }),
      'mcp:use', 'scopes.all: missing mcp:use')
  })

  it('refuses a method name in another case, which a loose upstream would run as the real one', async () => {
    const message = { ...toolCall('delete_order'), method: 'TOOLS/CALL' }
    await expectRefused(await post('/mcp', await token('mcp:use'), message), 'mcp: method "TOOLS/CALL" is a variant of tools/call')
  })
})

describe('GET and DELETE (the 2025-11-25 SSE stream and session end) keep the route\'s rules', () => {
  it('forwards GET and DELETE without reading a message, and refuses them for want of the route\'s scope only', async () => {
    const accessToken = await token('mcp:use')
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${gateway.url}/mcp`, { method, headers: { authorization: `Bearer ${accessToken}`, 'mcp-session-id': 's-1', 'mcp-method': 'tools/call', 'mcp-name': 'delete_order' } })
      expect(res.status).toBe(200)
    }
    expect(upstream.requests.map((request) => request.method)).toEqual(['GET', 'DELETE'])
    upstream.requests.length = 0
    await expectInsufficientScope(await fetch(`${gateway.url}/mcp`, { headers: { authorization: `Bearer ${await token('orders:write')}` } }),
      'mcp:use', 'missing mcp:use')
  })
})

describe('auth: optional', () => {
  it('lets an anonymous message through unless an MCP rule applies to it: then 401', async () => {
    expect((await send('/optional/mcp', undefined, { jsonrpc: '2.0', id: 1, method: 'tools/list' })).status).toBe(200)
    upstream.requests.length = 0
    const res = await send('/optional/mcp', undefined, toolCall('delete_order'))
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="test"')
    expect(upstream.requests).toHaveLength(0)
  })
})

describe('abuse', () => {
  const head = async (headers: string, body: string) => {
    const accessToken = await token('mcp:use orders:read')
    return rawRequest(gateway.port, `POST /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n` +
      `Authorization: Bearer ${accessToken}\r\n${headers}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  }

  it('refuses a duplicate Mcp-Name header, even when one copy is right', async () => {
    const res = await head('Mcp-Method: tools/call\r\nMcp-Name: get_order\r\nMcp-Name: delete_order\r\n', JSON.stringify(toolCall('get_order')))
    expect(res.status).toBe(400)
    expect(upstream.requests).toHaveLength(0)
    expect(deniedReasons()).toEqual(['mcp: the Mcp-Name header is sent more than once'])
  })

  it('refuses a duplicate Mcp-Method header', async () => {
    const res = await head('Mcp-Method: tools/call\r\nMcp-Method: tools/call\r\nMcp-Name: get_order\r\n', JSON.stringify(toolCall('get_order')))
    expect(res.status).toBe(400)
    expect(upstream.requests).toHaveLength(0)
  })

  it('never forwards a header value with a bare CR or LF (the HTTP parser refuses it)', async () => {
    for (const smuggled of ['Mcp-Name: get_order\rX-Injected: 1\r\n', 'Mcp-Name: get_order\nMcp-Name: delete_order\r\n']) {
      const res = await head(`Mcp-Method: tools/call\r\n${smuggled}`, JSON.stringify(toolCall('get_order')))
      expect(res.status).toBe(400)
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('refuses raw non-ASCII bytes in Mcp-Name (a name outside ASCII arrives Base64-encoded)', async () => {
    const name = 'd\u0435lete_order'  // Cyrillic е
    const body = JSON.stringify(toolCall(name))
    const res = await rawRequest(gateway.port, `POST /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n` +
      `Authorization: Bearer ${await token('mcp:use tools:other')}\r\nMcp-Method: tools/call\r\n` +
      `Mcp-Name: ${Buffer.from(name, 'utf8').toString('latin1')}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    expect(res.status).toBe(400)
    expect(upstream.requests).toHaveLength(0)
    expect(deniedReasons()).toEqual(['mcp: the Mcp-Name header has characters a plain value may not carry'])
  })

  it('refuses a huge Mcp-Name that does not match, and one past the header limit with 431', async () => {
    const accessToken = await token('mcp:use orders:read')
    const big = 'a'.repeat(12 * 1024)
    await expectRefused(await post('/mcp', accessToken, toolCall('get_order'), { 'mcp-method': 'tools/call', 'mcp-name': big }),
      /^mcp: Mcp-Name "a{80}…", body "get_order"$/)
    const huge = await post('/mcp', accessToken, toolCall('get_order'), { 'mcp-method': 'tools/call', 'mcp-name': 'a'.repeat(20 * 1024) })
    expect(huge.status).toBe(431)
    expect(upstream.requests).toHaveLength(0)
  })

  it('compares tool names exactly: a Cyrillic look-alike is another tool, so it gets "*", not delete_order\'s rule nor none', async () => {
    const lookalike = 'd\u0435lete_order'
    await expectInsufficientScope(await post('/mcp', await token('mcp:use orders:write', { department: 'sales' }), toolCall(lookalike)),
      'mcp:use tools:other', 'mcp.tools.*.scopes.all: missing tools:other')
  })

  it("gives a name that differs from a configured one only in case, width or invisible characters that one's rule", async () => {
    for (const variant of ['DELETE_ORDER', 'Delete_Order', '\uff44\uff45\uff4c\uff45\uff54\uff45_\uff4f\uff52\uff44\uff45\uff52', 'delete\u200b_order', 'delete_order\u00a0']) {
      upstream.requests.length = 0
      gateway.logs.length = 0
      // The token may call any tool but delete_order: a loose upstream must not run delete_order for it.
      await expectInsufficientScope(await post('/mcp', await token('mcp:use tools:other orders:read'), toolCall(variant)),
        'mcp:use orders:write', 'mcp.tools.delete_order.scopes.all: missing orders:write')
    }
  })
})

describe('metrics and reload', () => {
  it('counts denials by route and rule, with configured names only, and applies a changed rule on reload', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-mcp-'))
    const file = path.join(dir, 'portcullis.yaml')
    const base = { ...config(upstream, issuer), server: { realm: 'test', public_url: PUBLIC, listen: '127.0.0.1:0' }, admin: { listen: '127.0.0.1:0' } }
    writeFileSync(file, stringify(base))
    const { stream: logStream } = lineCollector()
    const running = await runPortcullis(file, { port: 0, adminPort: 0, watch: false, logStream })
    try {
      const url = `http://127.0.0.1:${(running.gateway.server.address() as AddressInfo).port}/mcp`
      const metrics = `http://127.0.0.1:${(running.admin!.server.address() as AddressInfo).port}/metrics`
      const call = async (scope: string, name: string) => {
        const message = toolCall(name)
        return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${await token(scope)}`, ...mirrored(message) },
          body: JSON.stringify(message) })
      }
      expect((await call('mcp:use', 'delete_order')).status).toBe(403)
      expect((await call('mcp:use', 'client_made_up_9f3b')).status).toBe(403)
      expect((await call('mcp:use', 'CLIENT_MADE_UP_9F3B')).status).toBe(403)
      const scraped = await scrape(metrics)
      const denials = (condition: string) => valueOf(scraped, 'portcullis_authorization_denials_total', { route: 'mcp', condition })
      expect(denials('mcp.tools.delete_order.scopes.all')).toBe(1)
      expect(denials('mcp.tools.*.scopes.all')).toBe(2)
      expect(labelValues(scraped).filter(({ value }) => /made_up/i.test(value))).toEqual([])

      // Reload: delete_order now needs orders:admin as well.
      const next = config(upstream, issuer, { ...MCP_RULES, tools: { ...MCP_RULES.tools, delete_order: { scopes: { all: ['orders:write', 'orders:admin'] } } } })
      writeFileSync(file, stringify({ ...next, server: base.server, admin: base.admin }))
      expect(await running.reload()).toBe(true)
      upstream.requests.length = 0
      const res = await call('mcp:use orders:write', 'delete_order')
      expect(res.status).toBe(403)
      expect(res.headers.get('www-authenticate')).toBe(scopeChallenge('mcp:use orders:write orders:admin'))
      expect(upstream.requests).toHaveLength(0)
      expect((await call('mcp:use orders:write orders:admin', 'delete_order')).status).toBe(200)
    } finally {
      await running.shutdown('test')
    }
  })
})
