/**
 * Issue 19, what the gateway does to an MCP exchange it lets through (MCP 2026-07-28): the client's token never
 * reaches the MCP server unless the config says so (Security Considerations, Access Token Privilege
 * Restriction), the session header passes both ways (Streamable HTTP, earlier revisions), an SSE stream is
 * relayed as it is written with the server's `X-Accel-Buffering: no`, and a client that closes the stream
 * cancels the request upstream (Streamable HTTP, Cancellation).
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'

interface Seen { authorization: string | undefined; session: string | undefined; closedEarly: boolean }

/** An MCP server stand-in: `tools/list` answers JSON; `stream` writes one SSE event and keeps the stream open. */
async function startMcpUpstream(): Promise<{ url: string; seen: Seen[]; streamClosed: Promise<void>; close(): Promise<void> }> {
  const seen: Seen[] = []
  let closed!: () => void
  const streamClosed = new Promise<void>((resolve) => { closed = resolve })
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const entry: Seen = { authorization: req.headers.authorization, session: req.headers['mcp-session-id'] as string | undefined, closedEarly: false }
      seen.push(entry)
      const message = JSON.parse(Buffer.concat(chunks).toString()) as { id: number; method: string }
      if (message.method !== 'stream') {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'session-from-server' })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { tools: [] } }))
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
      res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } })}\n\n`)
      res.on('close', () => {
        entry.closedEarly = !res.writableEnded
        closed()
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, streamClosed,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

let issuer: TestIssuer
let upstream: Awaited<ReturnType<typeof startMcpUpstream>>
let gateway: RunningGateway
let passing: RunningGateway

const ROUTES = [{ id: 'mcp', path: '/mcp', upstream: 'main', scopes: { all: ['mcp:use'] }, mcp: { tools: { '*': { scopes: { all: ['mcp:use'] } } } } }]

beforeAll(async () => {
  [issuer, upstream] = await Promise.all([startTestIssuer(), startMcpUpstream()])
  ;[gateway, passing] = await Promise.all([
    startGateway(testConfig({ upstream, issuer, routes: ROUTES })),
    // The explicit choice of an MCP server that validates tokens itself.
    startGateway(testConfig({ upstream, issuer, routes: ROUTES, forward: { strip_authorization: false } })),
  ])
})

afterAll(async () => {
  await Promise.all([gateway.close(), passing.close()])
  await Promise.all([upstream.close(), issuer.close()])
})

async function send(target: RunningGateway, method: string, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(`${target.url}/mcp`, {
    method: 'POST', signal,
    headers: {
      authorization: `Bearer ${await issuer.sign({ scope: 'mcp:use' })}`, 'content-type': 'application/json',
      accept: 'application/json, text/event-stream', 'mcp-method': method, ...headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method }),
  })
}

describe('forwarding an MCP exchange', () => {
  it('keeps the client\'s token from the MCP server by default; forward.strip_authorization: false passes it on', async () => {
    upstream.seen.length = 0
    expect((await send(gateway, 'tools/list')).status).toBe(200)
    expect((await send(passing, 'tools/list')).status).toBe(200)
    expect(upstream.seen.map((entry) => entry.authorization?.startsWith('Bearer '))).toEqual([undefined, true])
  })

  it('passes Mcp-Session-Id both ways', async () => {
    upstream.seen.length = 0
    const res = await send(gateway, 'tools/list', { 'mcp-session-id': 'session-from-client' })
    expect(res.headers.get('mcp-session-id')).toBe('session-from-server')
    expect(upstream.seen[0]!.session).toBe('session-from-client')
  })

  it('relays an SSE event before the stream ends, with X-Accel-Buffering: no; closing it cancels the request upstream', async () => {
    upstream.seen.length = 0
    const abort = new AbortController()
    const res = await send(gateway, 'stream', {}, abort.signal)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/event-stream')
    expect(res.headers.get('x-accel-buffering')).toBe('no')
    const reader = res.body!.getReader()
    const first = new TextDecoder().decode((await reader.read()).value)
    expect(first).toContain('notifications/progress')
    abort.abort()
    await upstream.streamClosed
    expect(upstream.seen[0]!.closedEarly).toBe(true)
  })
})
