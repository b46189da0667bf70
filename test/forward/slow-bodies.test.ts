/**
 * Issue 15, item 2: slow request bodies must not hold the upstream's connections. Small bodies are read
 * whole before a connection is taken, a body that pauses or crawls is 408 (the upstream request aborted),
 * and a request that finds every connection busy waits a bounded time, then 503.
 */
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it, vi, type TestContext } from 'vitest'
import { slowClient } from '../support/slow-client.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

type ConfigParts = Omit<Parameters<typeof testConfig>[0], 'upstream' | 'issuer'>

async function setup(onTestFinished: TestContext['onTestFinished'], parts: ConfigParts = {}, slowMs?: number):
  Promise<{ upstream: RecordingUpstream; issuer: TestIssuer; gateway: RunningGateway }> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream({ ...(slowMs !== undefined && { slowMs }) }), startTestIssuer()])
  const gateway = await startGateway(testConfig({
    upstream: { url: upstream.url }, issuer,
    routes: [{ id: 'hook', path: '/hook/**', methods: ['POST'], upstream: 'main', auth: 'none' },
      { id: 'all', path: '/**', upstream: 'main', auth: 'required' }],
    ...parts,
  }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway }
}

/** A client that declares a body and then sends it a byte at a time; `answer` resolves with the status line. */
const slowClientOf = (port: number, length: number, everyMs: number) => slowClient(port, { path: '/hook/x', length, first: 'x', everyMs })

describe('slow request bodies (issue 15, item 2)', () => {
  it('keeps answering a normal request on the same upstream within 1 s while 200 clients trickle their bodies', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway } = await setup(onTestFinished)
    const clients = Array.from({ length: 200 }, () => slowClientOf(gateway.port, 60_000, 500))
    onTestFinished(() => { for (const client of clients) client.socket.destroy() })
    await sleep(1500)
    const token = await issuer.sign({ scope: 'orders:read' })
    for (let i = 0; i < 3; i++) {
      const started = performance.now()
      const res = await fetch(`${gateway.url}/orders/${i}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) })
      const ms = performance.now() - started
      expect(res.status).toBe(200)
      expect(ms).toBeLessThan(1000)
    }
    // None of the trickling bodies took an upstream connection: only the three GETs reached it.
    expect(upstream.requests.map((request) => request.method)).toEqual(['GET', 'GET', 'GET'])
    expect(upstream.connections).toBeLessThanOrEqual(3)
  })

  it('answers 408 to a small body that stops arriving, without ever opening an upstream connection', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { body_timeout: '1s' } })
    const client = slowClientOf(gateway.port, 1000, 60_000)
    onTestFinished(() => { client.socket.destroy() })
    const started = performance.now()
    expect(await client.answer).toBe('HTTP/1.1 408 Request Timeout')
    expect(performance.now() - started).toBeLessThan(3000)
    expect(upstream.connections).toBe(0)
    expect(upstream.requests).toHaveLength(0)
    // The request line is written at the end of the turn that made it (src/server/log-output.ts).
    await vi.waitFor(() => expect(gateway.logs.join('')).toContain('"error":"request_timeout"'))
  })

  it('a body that says it is gRPC (application/grpc) but goes to an HTTP/1.1 upstream is watched like any other: 408, no upstream connection', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { body_timeout: '1s' } })
    const socket = net.connect({ port: gateway.port, host: '127.0.0.1' })
    onTestFinished(() => { socket.destroy() })
    const answer = new Promise<string>((resolve) => {
      socket.setEncoding('latin1')
      socket.on('data', (chunk: string) => resolve(chunk.split('\r\n')[0]!))
      socket.on('close', () => resolve(''))
    })
    socket.on('connect', () => {
      socket.write('POST /hook/x HTTP/1.1\r\nHost: gw\r\nContent-Type: application/grpc\r\nTE: trailers\r\nContent-Length: 1000\r\n\r\nx')
    })
    expect(await answer).toBe('HTTP/1.1 408 Request Timeout')
    expect(upstream.connections).toBe(0)
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 408 to a streamed body that pauses longer than body_timeout, and aborts the upstream request', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { body_timeout: '1s', body_buffer_size: '1kb' } })
    const socket = net.connect(gateway.port, '127.0.0.1')
    onTestFinished(() => { socket.destroy() })
    const answer = new Promise<string>((resolve) => {
      socket.setEncoding('latin1')
      socket.on('data', (chunk: string) => resolve(chunk.split('\r\n')[0]!))
    })
    socket.write(`POST /hook/big HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\n${'y'.repeat(4096)}`)
    expect(await answer).toBe('HTTP/1.1 408 Request Timeout')
    await sleep(200)
    expect(upstream.requests).toHaveLength(0)
    expect(upstream.incomplete).toHaveLength(1)
    expect(upstream.incomplete[0]!.bodyBytes).toBeLessThan(100_000)
  })

  it('answers 408 to a streamed body that keeps coming but slower than body_min_rate', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { body_timeout: '1s', body_buffer_size: '1kb', body_min_rate: '1kb' } })
    const client = slowClientOf(gateway.port, 100_000, 100)
    onTestFinished(() => { client.socket.destroy() })
    const started = performance.now()
    expect(await client.answer).toBe('HTTP/1.1 408 Request Timeout')
    expect(performance.now() - started).toBeLessThan(3000)
    await sleep(200)
    expect(upstream.requests).toHaveLength(0)
  })

  it('forwards a body sent in pauses shorter than body_timeout, whole', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { server: { body_timeout: '1s', body_min_rate: '0b' } })
    const client = slowClientOf(gateway.port, 6, 300)
    onTestFinished(() => { client.socket.destroy() })
    expect(await client.answer).toBe('HTTP/1.1 200 OK')
    expect(upstream.requests[0]!.bodyBytes).toBe(6)
  })

  it('answers 503 with Retry-After when no pool connection frees up within queue_timeout, and never sends that request', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway } = await setup(onTestFinished, { upstreamExtra: { connections: 1, queue_timeout: '300ms' } }, 2000)
    const headers = { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` }
    const first = fetch(`${gateway.url}/slow/1`, { headers })
    await sleep(100)
    const started = performance.now()
    const second = await fetch(`${gateway.url}/orders/2`, { headers })
    expect(second.status).toBe(503)
    expect(second.headers.get('retry-after')).toBe('1')
    expect(await second.json()).toMatchObject({ error: 'temporarily_unavailable' })
    expect(performance.now() - started).toBeLessThan(1500)
    expect((await first).status).toBe(200)
    await sleep(100)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/slow/1'])
    // The pool is whole again: the next request goes through.
    expect((await fetch(`${gateway.url}/orders/3`, { headers })).status).toBe(200)
  })

  it('lets streamed bodies take at most half of an upstream\'s connections: the next one is 503, GETs still pass', async ({ onTestFinished }) => {
    const { upstream, issuer, gateway } = await setup(onTestFinished, { server: { body_buffer_size: '1kb' }, upstreamExtra: { connections: 2 } })
    const holder = slowClientOf(gateway.port, 100_000, 50)
    onTestFinished(() => { holder.socket.destroy() })
    await sleep(100)
    holder.socket.write('z'.repeat(4096))
    await sleep(300)
    const second = slowClientOf(gateway.port, 100_000, 50)
    onTestFinished(() => { second.socket.destroy() })
    await sleep(100)
    second.socket.write('z'.repeat(4096))
    expect(await second.answer).toBe('HTTP/1.1 503 Service Unavailable')
    const started = performance.now()
    const res = await fetch(`${gateway.url}/orders/1`, { headers: { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` } })
    expect(res.status).toBe(200)
    expect(performance.now() - started).toBeLessThan(1000)
    expect(upstream.requests.map((request) => request.method)).toEqual(['GET'])
  })
})
