/**
 * `client_metadata_documents.rate`: one client address can make the server fetch at most `fetches` documents
 * per window (failed fetches counted) and at most `concurrent` at once; beyond either /authorize answers 429
 * with Retry-After and nothing is fetched. Another address is not held back, and a lookup the cache answers,
 * or that shares a fetch in flight, costs nothing.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Agent } from 'undici'
import { describe, expect, it, vi, type TestContext } from 'vitest'
import { ALICE } from '../../support/authserver.js'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { authorizationUrl } from '../../support/registration.js'
import { listenForTest } from '../../support/upstream.js'

const LOOPBACK = 'http://127.0.0.1/callback'

interface DocumentServer {
  url(path: string): string
  /** Requests received so far, and the most that were open at once. */
  readonly hits: number
  readonly mostOpen: number
  /** Answers every held request (and those to come) at once. */
  release(): void
}

/** Documents at any path: a good one for `/good-*`, held open until release() for `/slow-*`, 404 otherwise. */
async function startDocumentServer(context: TestContext): Promise<DocumentServer> {
  let hits = 0
  let open = 0
  let mostOpen = 0
  let released = false
  const held: Array<() => void> = []
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    hits++
    open++
    mostOpen = Math.max(mostOpen, open)
    response.on('close', () => { open-- })
    const path = request.url ?? ''
    const answer = () => {
      if (path.startsWith('/good-') || path.startsWith('/slow-')) {
        const clientId = `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`
        response.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=600' }).end(JSON.stringify({
          client_id: clientId, client_name: 'CLI', redirect_uris: [LOOPBACK], grant_types: ['authorization_code'], token_endpoint_auth_method: 'none',
        }))
      } else response.writeHead(404).end()
    }
    if (path.startsWith('/slow-') && !released) held.push(answer)
    else answer()
  })
  const port = await listenForTest(server, context)
  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    get hits() { return hits },
    get mostOpen() { return mostOpen },
    release() {
      released = true
      for (const answer of held.splice(0)) answer()
    },
  }
}

async function start(context: TestContext, rate: Record<string, unknown>): Promise<RunningGateway & { issuer: string }> {
  const gateway = await startAuthServerGateway({
    access_token: { audience: ['orders-api'] },
    clients: [],
    users: [{ ...ALICE }],
    client_metadata_documents: { enabled: true, allow_private_addresses: true, scopes: ['orders:read'], rate },
  })
  context.onTestFinished(() => gateway.close())
  return gateway
}

/** /authorize for `clientId`, sent from `agent`'s address. */
async function authorizeFrom(gateway: RunningGateway & { issuer: string }, clientId: string, agent: Agent) {
  const { url } = await authorizationUrl(gateway.issuer, clientId, LOOPBACK)
  const response = await fetch(url, Object.assign({ redirect: 'manual' } as RequestInit, { dispatcher: agent }))
  return { status: response.status, retryAfter: response.headers.get('retry-after'), text: await response.text() }
}

function agentAt(context: TestContext, address: string): Agent {
  const agent = new Agent({ localAddress: address })
  context.onTestFinished(() => agent.close())
  return agent
}

describe('client_metadata_documents.rate', () => {
  it('counts every fetch of one address, failed ones too: the sixth within the window is 429 and fetches nothing', async (context) => {
    const docs = await startDocumentServer(context)
    const gateway = await start(context, { fetches: 5, window: '1m' })
    const mine = agentAt(context, '127.0.0.21')
    for (let i = 0; i < 5; i++) {
      // A document that is not there: the fetch fails (a page), and still counts.
      expect((await authorizeFrom(gateway, docs.url(`/missing-${i}.json`), mine)).status).toBe(400)
    }
    const refused = await authorizeFrom(gateway, docs.url('/good-1.json'), mine)
    expect(refused.status).toBe(429)
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1)
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(60)
    expect(docs.hits).toBe(5)
    // Another address has its own count.
    const other = await authorizeFrom(gateway, docs.url('/good-1.json'), agentAt(context, '127.0.0.22'))
    expect(other.status).toBe(302)
    expect(docs.hits).toBe(6)
    // Now cached: the first address gets it without a fetch, over its count or not.
    expect((await authorizeFrom(gateway, docs.url('/good-1.json'), mine)).status).toBe(302)
    expect(docs.hits).toBe(6)
  })

  it('holds at most `concurrent` slow fetches of one address open: the rest are 429 at once; another address is served meanwhile', async (context) => {
    const docs = await startDocumentServer(context)
    const gateway = await start(context, { fetches: 100, concurrent: 2 })
    const mine = agentAt(context, '127.0.0.23')
    const slow = Array.from({ length: 10 }, (_, i) => authorizeFrom(gateway, docs.url(`/slow-${i}.json`), mine))
    const answered: number[] = []
    for (const request of slow) void request.then((answer) => answered.push(answer.status))
    // The fetches beyond the two in flight (whichever two got there first) are refused without waiting for them.
    await vi.waitFor(() => expect(answered).toHaveLength(8), { timeout: 5000 })
    expect(answered).toEqual(Array(8).fill(429))
    expect(docs.mostOpen).toBe(2)
    expect((await authorizeFrom(gateway, docs.url('/good-other.json'), agentAt(context, '127.0.0.24'))).status).toBe(302)
    docs.release()
    await Promise.all(slow)
    expect(answered.slice(8)).toEqual([302, 302])
    // Both ended: the address may fetch again.
    expect((await authorizeFrom(gateway, docs.url('/good-2.json'), mine)).status).toBe(302)
  })

  it('parallel lookups of one client_id share one fetch and count once', async (context) => {
    const docs = await startDocumentServer(context)
    const gateway = await start(context, { fetches: 1, concurrent: 1 })
    const mine = agentAt(context, '127.0.0.25')
    const answers = await Promise.all(Array.from({ length: 10 }, () => authorizeFrom(gateway, docs.url('/good-shared.json'), mine)))
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(302))
    expect(docs.hits).toBe(1)
  })
})
