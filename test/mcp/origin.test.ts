/**
 * MCP Streamable HTTP "Security Warning": a server MUST validate Origin (DNS rebinding) and answer 403 to one
 * present and invalid. On a route with `mcp` the gateway does it: an Origin passes only when the route's CORS
 * allows it, or when the route leaves CORS to the upstream. Refusals reach nothing upstream.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway
const APP = 'https://inspector.example'

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const mcp = { tools: { echo: { scopes: { all: ['mcp:read'] } } } }
  gateway = await startGateway(testConfig({ upstream, issuer, routes: [
    { id: 'mcp', path: '/mcp', upstream: 'main', mcp },
    { id: 'mcp-browser', path: '/browser/mcp', upstream: 'main', mcp, cors: { allowed_origins: [APP] } },
    { id: 'mcp-upstream-cors', path: '/own/mcp', upstream: 'main', mcp, cors: { upstream: true } },
    { id: 'plain', path: '/api/**', upstream: 'main' },
  ] }))
})
afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})
beforeEach(() => { upstream.requests.length = 0 })

const call = (path: string, token: string, origin?: string) => fetch(`${gateway.url}${path}`, {
  method: 'POST',
  headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream',
    'mcp-method': 'tools/call', 'mcp-name': 'echo', ...(origin !== undefined && { origin }) },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: {} } }),
})

describe('Origin on MCP routes', () => {
  it('refuses a page of any origin where no CORS allows one (403), and lets a client without Origin through', async () => {
    const token = await issuer.sign({ scope: 'mcp:read' })
    const refused = await call('/mcp', token, 'http://attacker.example')
    expect(refused.status).toBe(403)
    expect(await refused.json()).toEqual({ error: 'access_denied', error_description: 'this origin may not call this MCP server' })
    const stream = await fetch(`${gateway.url}/mcp`, { headers: { authorization: `Bearer ${token}`, origin: 'http://127.0.0.1:9' } })
    expect(stream.status).toBe(403)
    expect(upstream.requests).toHaveLength(0)
    expect((await call('/mcp', token)).status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it("admits the origins the route's CORS allows, and leaves Origin to an upstream that handles CORS", async () => {
    const token = await issuer.sign({ scope: 'mcp:read' })
    expect((await call('/browser/mcp', token, APP)).status).toBe(200)
    expect((await call('/browser/mcp', token, 'https://evil-inspector.example')).status).toBe(403)
    expect((await call('/own/mcp', token, 'https://anything.example')).status).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/browser/mcp', '/own/mcp'])
  })

  it('does not touch routes without mcp', async () => {
    const res = await fetch(`${gateway.url}/api/x`, { headers: { authorization: `Bearer ${await issuer.sign({})}`, origin: 'http://attacker.example' } })
    expect(res.status).toBe(200)
  })
})
