/**
 * An upstream's pool serves its full size after many requests that went wrong on it: response heads the
 * gateway refuses (a control character in a header value, a header section past undici's limit, a malformed
 * status line), with and without a streamed body, clients gone while their request was at the upstream, and
 * requests refused before forwarding. After each kind, `upstreams.<name>.connections` requests at once all reach
 * the upstream together (none waits for a connection a failed request kept, none is answered 503 by
 * `queue_timeout`), and a streamed body is forwarded (the streamed requests' half of the pool was given back).
 */
import net, { type AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'

const CONNECTIONS = 3

/** An HTTP/1.1 upstream written by hand, so that it can answer what node's own server never would. */
async function startRawUpstream() {
  let inFlight = 0
  let mostAtOnce = 0
  const answers: Record<string, string> = {
    '/bad-char': 'HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok',
    '/huge-head': `HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(70_000)}\r\nContent-Length: 2\r\n\r\nok`,
    '/bad-status': 'HTTP/1.1 2x0 What\r\nContent-Length: 2\r\n\r\nok',
  }
  const server = net.createServer((socket) => {
    let buffered = ''
    socket.on('error', () => {})
    socket.on('data', async (chunk) => {
      buffered += chunk.toString('latin1')
      let end: number
      while ((end = buffered.indexOf('\r\n\r\n')) !== -1) {
        const head = buffered.slice(0, end)
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)
        if (buffered.length < end + 4 + length) return  // the body is still coming
        buffered = buffered.slice(end + 4 + length)
        const path = head.split(' ')[1] ?? '/'
        if (answers[path] !== undefined) { socket.write(answers[path]); continue }
        inFlight++
        mostAtOnce = Math.max(mostAtOnce, inFlight)
        await sleep(path.startsWith('/slow') ? 400 : 0)
        inFlight--
        if (!socket.destroyed) socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok')
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** The most requests the upstream held at once since the last reset. */
    mostAtOnce: () => mostAtOnce,
    reset: () => { mostAtOnce = 0 },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}

let upstream: Awaited<ReturnType<typeof startRawUpstream>>
let issuer: TestIssuer
let gateway: RunningGateway
let authorization: string

beforeAll(async () => {
  ;[upstream, issuer] = await Promise.all([startRawUpstream(), startTestIssuer()])
  gateway = await startGateway(testConfig({
    upstream: { url: upstream.url }, issuer,
    // Bodies past 1 KB stream to the upstream: at most half the pool's connections carry them at once.
    server: { body_buffer_size: '1kb' },
    upstreamExtra: { connections: CONNECTIONS, queue_timeout: '300ms', timeout: '5s' },
    routes: [{ id: 'all', path: '/**', upstream: 'main', scopes: { all: ['orders:read'] } }],
  }))
  authorization = `Bearer ${await issuer.sign({ scope: 'orders:read' })}`
})
afterAll(async () => {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
})

/** `connections` slow requests at once: each 200, and all of them at the upstream together. */
async function expectFullPool(): Promise<void> {
  upstream.reset()
  const statuses = await Promise.all(Array.from({ length: CONNECTIONS }, (_, i) =>
    fetch(`${gateway.url}/slow/${i}`, { headers: { authorization } }).then((res) => res.status)))
  expect(statuses).toEqual(Array(CONNECTIONS).fill(200))
  expect(upstream.mostAtOnce()).toBe(CONNECTIONS)
  const streamed = await fetch(`${gateway.url}/upload`, { method: 'POST', headers: { authorization, 'content-type': 'text/plain' }, body: 'z'.repeat(4096) })
  expect(streamed.status).toBe(200)
}

describe('the upstream pool after requests that failed on it', () => {
  it('is whole to begin with', expectFullPool)

  for (const path of ['/bad-char', '/huge-head', '/bad-status']) {
    it(`after 25 response heads refused (${path.slice(1)}), 5 of them with a streamed body: 502 each, then the full pool`, async () => {
      const statuses = await Promise.all(Array.from({ length: 20 }, () => fetch(`${gateway.url}${path}`, { headers: { authorization } }).then((res) => res.status)))
      // With a streamed body, one after the other (more at once would be refused for the streamed half).
      for (let i = 0; i < 5; i++) {
        statuses.push((await fetch(`${gateway.url}${path}`, { method: 'POST', headers: { authorization, 'content-type': 'text/plain' }, body: 'z'.repeat(4096) })).status)
      }
      expect(statuses).toEqual(Array(25).fill(502))
      await expectFullPool()
    })
  }

  it('after 20 clients gone while their request was at the upstream, then the full pool', async () => {
    await Promise.all(Array.from({ length: 20 }, async (_, i) => {
      const socket = net.connect(gateway.port, '127.0.0.1')
      socket.on('error', () => {})
      await new Promise((resolve) => socket.once('connect', resolve))
      socket.write(`GET /slow/gone-${i} HTTP/1.1\r\nHost: gw\r\nAuthorization: ${authorization}\r\n\r\n`)
      await sleep(100)
      socket.destroy()
    }))
    await sleep(500)
    await expectFullPool()
  })

  it('after 20 requests refused before forwarding (401, 400 for an encoded slash), then the full pool', async () => {
    const statuses = await Promise.all([
      ...Array.from({ length: 10 }, () => fetch(`${gateway.url}/slow/x`).then((res) => res.status)),
      ...Array.from({ length: 10 }, () => fetch(`${gateway.url}/slow/a%2Fb`, { headers: { authorization } }).then((res) => res.status)),
    ])
    expect(statuses.filter((status) => status === 401)).toHaveLength(10)
    expect(statuses.filter((status) => status === 400)).toHaveLength(10)
    await expectFullPool()
  })
})
