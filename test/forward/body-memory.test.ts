/**
 * `server.body_memory`: the bytes of request bodies read into memory, process-wide. Slow clients each holding
 * a buffered body fill it; past it the next body is refused 503 with Retry-After and never forwarded, the bodies
 * already held go on, and what a request held is given back when it ends. Out-of-range values are config errors.
 */
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it, vi, type TestContext } from 'vitest'
import { stringify } from 'yaml'
import { configProblems } from '../support/config-problems.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer } from '../support/issuer.js'
import { slowClient } from '../support/slow-client.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

async function setup(context: TestContext, server: Record<string, unknown>): Promise<{ upstream: RecordingUpstream; gateway: RunningGateway }> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({
    upstream: { url: upstream.url }, issuer,
    routes: [{ id: 'hook', path: '/hook/**', methods: ['POST'], upstream: 'main', auth: 'none' }],
    server,
  }))
  context.onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, gateway }
}

/** `portcullis_request_body_memory_bytes` now. */
async function heldBytes(gateway: RunningGateway): Promise<number> {
  const line = (await gateway.app.metrics.registry.metrics()).split('\n').find((text) => text.startsWith('portcullis_request_body_memory_bytes '))
  return Number(line?.split(' ')[1])
}

/** A client that declares a 64 KB body (buffered whole), sends `sent` bytes of it at once, then a byte every 200 ms. */
const holder = (port: number, sent: number) => slowClient(port, { path: '/hook/x', length: 64 * 1024, first: 'x'.repeat(sent), everyMs: 200 })

describe('server.body_memory', () => {
  it('past the budget a new body is refused 503 with Retry-After and never forwarded; a body held before goes on; the bytes come back when they end', async (context) => {
    const { upstream, gateway } = await setup(context, { body_memory: '1mb', body_buffer_size: '64kb', body_timeout: '10s', body_min_rate: '0b' })
    // 15 bodies of 62 KB held while their clients trickle, and one more client that sends 62 KB of its 64 and
    // waits: 992 KB of the 1,024.
    const held = Array.from({ length: 15 }, () => holder(gateway.port, 62 * 1024))
    context.onTestFinished(() => { for (const client of held) client.socket.destroy() })
    const finisher = net.connect(gateway.port, '127.0.0.1')
    context.onTestFinished(() => { finisher.destroy() })
    let finished = ''
    finisher.setEncoding('latin1').on('data', (chunk: string) => { finished += chunk })
    finisher.write(`POST /hook/finished HTTP/1.1\r\nHost: gw\r\nContent-Length: ${64 * 1024}\r\nConnection: close\r\n\r\n${'f'.repeat(62 * 1024)}`)
    // Read: the gauge says all 16 × 62 KB are held (whatever trickled in since, a byte every 200 ms, comes on top).
    await vi.waitFor(async () => expect(await heldBytes(gateway)).toBeGreaterThanOrEqual(16 * 62 * 1024), { timeout: 5000 })
    // 40 KB more is past it: 503 with Retry-After, and that body is never read on.
    const refused = holder(gateway.port, 40 * 1024)
    context.onTestFinished(() => { refused.socket.destroy() })
    let raw = ''
    refused.socket.on('data', (chunk: string) => { raw += chunk })
    expect(await refused.answer).toBe('HTTP/1.1 503 Service Unavailable')
    expect(raw).toMatch(/\r\nretry-after: 1\r\n/i)
    // A body held before goes on: sent to its end, it is forwarded.
    finisher.write('f'.repeat(2 * 1024))
    await vi.waitFor(() => expect(finished).toMatch(/^HTTP\/1\.1 200 OK/), { timeout: 3000 })
    // Within the budget again (the finished body's 64 KB given back): a small body goes through at once.
    const small = await fetch(`${gateway.url}/hook/small`, { method: 'POST', body: 'x'.repeat(10 * 1024) })
    expect(small.status).toBe(200)
    expect(gateway.logs.some((line) => line.includes('server.body_memory'))).toBe(true)
    // The held clients go away: their bytes come back, and a body as large as theirs is forwarded.
    for (const client of held) client.socket.destroy()
    await vi.waitFor(async () => expect(await heldBytes(gateway)).toBe(0), { timeout: 5000 })
    const after = await fetch(`${gateway.url}/hook/after`, { method: 'POST', body: 'y'.repeat(60 * 1024) })
    expect(after.status).toBe(200)
    expect(upstream.requests.map((request) => request.url)).toEqual(['/hook/finished', '/hook/small', '/hook/after'])
  })

  it('0b sets no budget: 21 bodies of 60 KB are all read into memory (counted, never refused)', async (context) => {
    const { gateway } = await setup(context, { body_memory: '0b', body_timeout: '10s', body_min_rate: '0b' })
    const held = Array.from({ length: 20 }, () => holder(gateway.port, 60 * 1024))
    context.onTestFinished(() => { for (const client of held) client.socket.destroy() })
    await sleep(300)
    const another = holder(gateway.port, 60 * 1024)
    context.onTestFinished(() => { another.socket.destroy() })
    const outcome = await Promise.race([another.answer, sleep(500).then(() => 'still reading')])
    expect(outcome).toBe('still reading')
    // All 21 read into memory, 1.26 MB: still counted (the gauge), never refused.
    await vi.waitFor(async () => expect(await heldBytes(gateway)).toBeGreaterThanOrEqual(21 * 60 * 1024), { timeout: 5000 })
  })

  it('refuses a budget under 1mb or under body_buffer_size, and one of the wrong type', () => {
    const base = { upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes: [{ id: 'a', path: '/a', upstream: 'main', auth: 'none' }] }
    expect(configProblems(stringify({ ...base, server: { body_memory: '512kb' } }))).toEqual([expect.stringMatching(/^server\.body_memory: must be 0b \(no budget\) or at least 1mb/)])
    expect(configProblems(stringify({ ...base, server: { body_memory: '2mb', body_buffer_size: '4mb' } }))).toEqual([expect.stringMatching(/^server\.body_memory: must be 0b/)])
    expect(configProblems(stringify({ ...base, server: { body_memory: 'lots' } }))).toEqual([expect.stringMatching(/^server\.body_memory: /)])
    expect(configProblems(stringify({ ...base, server: { body_memory: '0b' } }))).toEqual([])
    expect(configProblems(stringify({ ...base, server: { body_memory: '512mb' } }))).toEqual([])
  })
})
