/**
 * Issue 19, scope hierarchies (`scope_implies:`; MCP 2026-07-28, Authorization, Step-Up Authorization Flow:
 * servers account for them): a broader scope satisfies a route or an MCP tool that asks for a narrower one,
 * transitively; never the other way, never by a name that merely looks related; the upstream still sees the
 * scopes granted, and challenges still name the narrow scope. Every refusal proves nothing was forwarded.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { configProblems } from '../support/config-problems.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const IMPLIES = {
  'files:admin': ['files:write', 'mcp:admin'],
  'files:write': ['files:read'],
  'mcp:admin': ['mcp:write'],
  'mcp:write': ['mcp:read'],
}

let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway

beforeAll(async () => {
  [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  gateway = await startGateway({
    ...testConfig({
      upstream, issuer, routes: [
        { id: 'read', path: '/files/**', upstream: 'main', methods: ['GET'], scopes: { all: ['files:read'] } },
        { id: 'write', path: '/files/**', upstream: 'main', methods: ['PUT'], scopes: { all: ['files:write'] } },
        { id: 'either', path: '/either/**', upstream: 'main', scopes: { any: ['mcp:read', 'other:read'] } },
        { id: 'mcp', path: '/mcp', upstream: 'main', scopes: { all: ['mcp:read'] },
          mcp: { tools: { delete_file: { scopes: { all: ['mcp:write'] } } } } },
      ],
    }),
    scope_implies: IMPLIES,
  })
})

afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

beforeEach(() => { upstream.requests.length = 0 })

const token = (scope: string) => issuer.sign({ scope })

async function call(path: string, scope: string, method = 'GET'): Promise<Response> {
  return fetch(`${gateway.url}${path}`, { method, headers: { authorization: `Bearer ${await token(scope)}` } })
}

async function callTool(name: string, scope: string): Promise<Response> {
  const message = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } }
  return fetch(`${gateway.url}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${await token(scope)}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream',
      'mcp-method': 'tools/call', 'mcp-name': name,
    },
    body: JSON.stringify(message),
  })
}

describe('a broader scope satisfies a narrower one', () => {
  it('directly and through a chain; the upstream sees exactly the scopes granted', async () => {
    expect((await call('/files/a', 'files:write')).status).toBe(200)
    const admin = await call('/files/a', 'files:admin')
    expect(admin.status).toBe(200)
    expect(upstream.requests.map((request) => request.headers['x-auth-scopes'])).toEqual(['files:write', 'files:admin'])
    expect((await call('/files/a', 'files:admin', 'PUT')).status).toBe(200)
  })

  it('counts for a route\'s scopes.any, and across hierarchies (files:admin → mcp:admin → … → mcp:read)', async () => {
    expect((await call('/either/x', 'mcp:write')).status).toBe(200)
    expect((await call('/either/x', 'files:admin')).status).toBe(200)
  })

  it('counts for an MCP tool\'s rule and the route\'s together', async () => {
    const res = await callTool('delete_file', 'mcp:admin')
    expect(res.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })
})

describe('and nothing else does', () => {
  it('a narrower scope never satisfies a broader one: 403 naming the scope the route asks for', async () => {
    const res = await call('/files/a', 'files:read', 'PUT')
    expect(res.status).toBe(403)
    expect(res.headers.get('www-authenticate')).toContain('error="insufficient_scope"')
    expect(res.headers.get('www-authenticate')).toContain('scope="files:write"')
    expect(upstream.requests).toHaveLength(0)
  })

  it('names that look related imply nothing (prefixes, suffixes, case, wildcards)', async () => {
    for (const scope of ['files:adminx', 'files:admi', 'FILES:ADMIN', 'files:*', 'files', 'files:admin:extra', 'xfiles:admin']) {
      const res = await call('/files/a', scope)
      expect(res.status, scope).toBe(403)
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it('an MCP tool short of scope: one challenge that names the narrow scopes, nothing forwarded', async () => {
    const res = await callTool('delete_file', 'mcp:read')
    expect(res.status).toBe(403)
    expect(/scope="([^"]+)"/.exec(res.headers.get('www-authenticate')!)![1]!.split(' ').sort()).toEqual(['mcp:read', 'mcp:write'])
    expect(upstream.requests).toHaveLength(0)
  })

  it('without scope_implies, the same broad token is refused (the hierarchy is what lets it through)', async () => {
    const plain = await startGateway(testConfig({ upstream, issuer, routes: [{ id: 'read', path: '/files/**', upstream: 'main', scopes: { all: ['files:read'] } }] }))
    try {
      const res = await fetch(`${plain.url}/files/a`, { headers: { authorization: `Bearer ${await token('files:admin')}` } })
      expect(res.status).toBe(403)
      expect(upstream.requests).toHaveLength(0)
    } finally {
      await plain.close()
    }
  })
})

describe('scope_implies at load', () => {
  const base = 'upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: r\n    path: "/r"\n    upstream: main\n    auth: none\n'
  const problems = (text: string) => configProblems(base + text)

  it('accepts a cycle (the scopes are then equivalent) and refuses a scope implying itself', () => {
    expect(problems('scope_implies:\n  a: [b]\n  b: [a]\n')).toEqual([])
    expect(problems('scope_implies:\n  a: [b, a]\n')).toEqual(['scope_implies.a[1]: a implies itself'])
  })

  it('refuses an empty list, a non-list and an empty name', () => {
    expect(problems('scope_implies:\n  a: []\n')).toHaveLength(1)
    expect(problems('scope_implies:\n  a: b\n')).toHaveLength(1)
    expect(problems('scope_implies:\n  a: [""]\n')).toHaveLength(1)
  })
})
