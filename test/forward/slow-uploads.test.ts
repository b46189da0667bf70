/**
 * Slow large uploads: `server.body_min_rate` is measured over the last `server.body_timeout` (a sliding
 * window), so a body that bursts then trickles is 408 within seconds instead of holding a streamed upstream
 * request for a minute; and `server.body_streams_per_address` bounds the bodies one client address streams at
 * once (429), so 30 slow uploads from one address cannot take the pool's streamed share from a fast upload.
 */
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it, vi, type TestContext } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { slowClient } from '../support/slow-client.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const MB = 1024 * 1024

async function setup(context: TestContext, server: Record<string, unknown>, upstreamExtra: Record<string, unknown> = {})
  : Promise<{ upstream: RecordingUpstream; gateway: RunningGateway }> {
  const upstream = await startRecordingUpstream()
  const gateway = await startGateway({
    ...testConfig({ upstream: { url: upstream.url }, routes: [{ id: 'upload', path: '/upload/**', methods: ['POST'], upstream: 'main', auth: 'none' }], upstreamExtra }),
    server: { realm: 'test', body_buffer_size: '1kb', max_body_size: '2mb', ...server },
  })
  context.onTestFinished(async () => { await gateway.close(); await upstream.close() })
  return { upstream, gateway }
}

/** A 1 MB upload from `from` that sends `burst` bytes at once, then one byte every `everyMs`. */
function trickle(context: TestContext, port: number, from: string, burst: number, everyMs: number): { socket: net.Socket; status: Promise<string> } {
  const client = slowClient(port, { path: '/upload/x', length: MB, first: 'b'.repeat(burst), everyMs, localAddress: from })
  context.onTestFinished(() => { client.socket.destroy() })
  return { socket: client.socket, status: client.answer }
}

/** A 1 MB upload from `from`, sent as fast as the connection takes it. */
async function fastUpload(port: number, from: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', localAddress: from })
    let text = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.on('error', reject)
    socket.on('end', () => resolve(text.split('\r\n')[0]!))
    socket.on('connect', () => {
      socket.write(`POST /upload/fast HTTP/1.1\r\nHost: gw\r\nContent-Length: ${MB}\r\nConnection: close\r\n\r\n`)
      socket.write(Buffer.alloc(MB, 'f'))
    })
  })
}

describe('slow large uploads', () => {
  it('a body that bursts 64 KB and then trickles is 408 once the burst leaves the window, not after a minute', async (context) => {
    const { upstream, gateway } = await setup(context, { body_timeout: '2s', body_min_rate: '1kb' })
    const started = performance.now()
    const upload = trickle(context, gateway.port, '127.0.0.41', 64 * 1024, 200)
    expect(await upload.status).toBe('HTTP/1.1 408 Request Timeout')
    // Averaged from the start (64 KB at 1 KB/s), it would have passed for about 64 s.
    expect(performance.now() - started).toBeLessThan(8000)
    await sleep(200)
    expect(upstream.requests).toHaveLength(0)
  })

  it('an honest upload at the minimum rate or faster passes, whatever its pace within the window', async (context) => {
    const { upstream, gateway } = await setup(context, { body_timeout: '1s', body_min_rate: '1kb' })
    expect(await fastUpload(gateway.port, '127.0.0.42')).toBe('HTTP/1.1 200 OK')
    expect(upstream.requests[0]!.bodyBytes).toBe(MB)
  })

  it('30 slow uploads from one address: 28 refused at once, the 2 that stream are 408 within seconds; a fast 1 MB upload from elsewhere passes meanwhile', async (context) => {
    const { upstream, gateway } = await setup(context, { body_timeout: '2s', body_min_rate: '1kb', body_streams_per_address: 2 }, { connections: 8 })
    const started = performance.now()
    const slow = Array.from({ length: 30 }, () => trickle(context, gateway.port, '127.0.0.43', 64 * 1024, 1000))
    const answers: string[] = []
    for (const upload of slow) void upload.status.then((line) => answers.push(line))
    // Two stream (which two is the scheduler's); the other 28 are refused at once.
    await vi.waitFor(() => expect(answers).toHaveLength(28), { timeout: 5000 })
    expect(answers).toEqual(Array(28).fill('HTTP/1.1 429 Too Many Requests'))
    // While those two are still held, a fast upload from another address streams through.
    expect(await fastUpload(gateway.port, '127.0.0.44')).toBe('HTTP/1.1 200 OK')
    expect(answers).toHaveLength(28)
    // Then the two trickling ones fail once their burst has left the window.
    await vi.waitFor(() => expect(answers).toHaveLength(30), { timeout: 10_000 })
    expect(answers.slice(28)).toEqual(['HTTP/1.1 408 Request Timeout', 'HTTP/1.1 408 Request Timeout'])
    expect(performance.now() - started).toBeLessThan(10_000)
    expect(upstream.requests.map((request) => [request.url, request.bodyBytes])).toEqual([['/upload/fast', MB]])
    // Both gone, the address may stream again.
    await sleep(300)
    expect(await fastUpload(gateway.port, '127.0.0.43')).toBe('HTTP/1.1 200 OK')
  }, 20_000)
})
