/**
 * `server.admission`: past `max_in_flight` requests waiting for their answer, a new one is answered 503
 * `temporarily_unavailable` with `Retry-After` before anything of it is checked, read or forwarded. A request stops
 * waiting once its response head goes out, so streams do not hold places.
 */
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { stringify } from 'yaml'
import { describe, expect, it, type TestContext } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { admissionPolicy } from '../../src/server/admission.js'
import { startGateway, type RunningGateway } from '../support/gateway.js'

/** An upstream that holds `…/hold…` answers until released, and answers `…/stream…` with a head at once and its body on release. */
async function holdingUpstream(context: TestContext) {
  const received: string[] = []
  const held: Array<() => void> = []
  const server = http.createServer((req, res) => {
    received.push(`${req.method} ${req.url}`)
    req.resume()
    if (req.url!.includes('/hold')) {
      held.push(() => res.end('held'))
    } else if (req.url!.includes('/stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: first\n\n')
      held.push(() => res.end('data: last\n\n'))
    } else {
      res.end('ok')
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  context.onTestFinished(async () => {
    for (const release of held.splice(0)) release()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    releaseAll: () => { for (const release of held.splice(0)) release() },
    async until(count: number) {
      for (let i = 0; i < 200 && received.length < count; i++) await sleep(10)
      expect(received).toHaveLength(count)
    },
  }
}

type Upstream = Awaited<ReturnType<typeof holdingUpstream>>

const config = (upstream: Upstream, admission?: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  server: { realm: 'test', ...(admission && { admission }), ...(extra.server as object) },
  // Enough connections that no request waits for one at the gateway's pool.
  upstreams: { main: { url: upstream.url, timeout: '10s', connections: 2000 } },
  routes: [{ id: 'open', path: '/**', upstream: 'main', auth: 'none' }],
  ...Object.fromEntries(Object.entries(extra).filter(([key]) => key !== 'server')),
})

async function start(context: TestContext, admission?: Record<string, unknown>, extra?: Record<string, unknown>) {
  const upstream = await holdingUpstream(context)
  const gateway = await startGateway(config(upstream, admission, extra))
  context.onTestFinished(() => gateway.close())
  return { upstream, gateway }
}

/** `count` requests to `/hold-i` left waiting at the upstream; resolves their answers later. */
function hold(gateway: RunningGateway, count: number, from = 0): Array<Promise<number>> {
  return Array.from({ length: count }, (_, i) => fetch(`${gateway.url}/hold-${from + i}`).then(async (res) => { await res.text(); return res.status }))
}

describe('server.admission', () => {
  it('past max_in_flight, answers 503 temporarily_unavailable with Retry-After at once, and the upstream never sees it', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 3, retry_after: '2s' })
    const waiting = hold(gateway, 3)
    await upstream.until(3)
    const refused = await fetch(`${gateway.url}/next`, { headers: { authorization: 'Bearer some-token' } })
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('2')
    expect(refused.headers.get('cache-control')).toBe('no-store')
    expect(refused.headers.get('content-type')).toBe('application/json; charset=utf-8')
    expect(await refused.json()).toEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' })
    await sleep(100)
    expect(upstream.received).toHaveLength(3)
    upstream.releaseAll()
    expect(await Promise.all(waiting)).toEqual([200, 200, 200])
    // The places are free again.
    const next = await fetch(`${gateway.url}/after`)
    expect(next.status).toBe(200)
    expect(upstream.received.at(-1)).toBe('GET /after')
  })

  it('a response whose head has gone out holds no place: more streams than max_in_flight flow at once', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 2 })
    const streams = []
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${gateway.url}/stream-${i}`)
      expect(res.status).toBe(200)
      streams.push(res)
    }
    const waiting = hold(gateway, 2)
    await upstream.until(6)
    expect((await fetch(`${gateway.url}/one-more`)).status).toBe(503)
    upstream.releaseAll()
    for (const res of streams) expect(await res.text()).toBe('data: first\n\ndata: last\n\n')
    expect(await Promise.all(waiting)).toEqual([200, 200])
    expect(upstream.received).toHaveLength(6)
  })

  it('a request with a body past the limit: the body is never read, the connection ends with the 503', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 1 })
    const waiting = hold(gateway, 1)
    await upstream.until(1)
    const socket = net.connect({ port: gateway.port, host: '127.0.0.1' })
    let text = ''
    socket.setEncoding('latin1').on('data', (chunk) => { text += chunk })
    const closed = new Promise((resolve) => socket.on('close', resolve))
    // The head promises 1 MB; only 10 bytes of it come.
    socket.write('POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n0123456789')
    await closed
    expect(text).toMatch(/^HTTP\/1\.1 503 /)
    expect(text.toLowerCase()).toContain('\r\nconnection: close\r\n')
    expect(text).toContain('"error":"temporarily_unavailable"')
    upstream.releaseAll()
    await Promise.all(waiting)
    expect(upstream.received).toEqual(['GET /hold-0'])
  })

  it('counts each shed request in portcullis_requests_total as overloaded, and warns once, without the token', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 1 })
    const waiting = hold(gateway, 1)
    await upstream.until(1)
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${gateway.url}/shed?access_token=in-query`, { headers: { authorization: 'Bearer secret-token-value' } })
      expect(res.status).toBe(503)
      await res.text()
    }
    const metrics = await gateway.app.metrics.registry.metrics()
    expect(metrics).toContain('portcullis_requests_total{route="(none)",method="GET",status="503",decision="overloaded",reason="temporarily_unavailable",protocol="http1"} 3')
    const warnings = gateway.logs.filter((line) => line.includes('server.admission.max_in_flight'))
    expect(warnings).toHaveLength(1)
    expect(JSON.parse(warnings[0]!)).toMatchObject({ level: 40, shed: 1, max_in_flight: 1 })
    const all = gateway.logs.join('\n')
    expect(all).not.toContain('secret-token-value')
    expect(all).not.toContain('in-query')
    upstream.releaseAll()
    await Promise.all(waiting)
    expect(upstream.received).toHaveLength(1)
  })

  it('holds 1000 waiting requests at max_in_flight 1000 and sheds the next', async (context) => {
    const { upstream, gateway: running } = await start(context, { max_in_flight: 1000 })
    // 1000 held over raw keep-alive sockets (fetch's pool would queue them client-side), the next one is shed.
    const sockets = await Promise.all(Array.from({ length: 1000 }, (_, i) => rawRequest(running.port, `/hold-${i}`)))
    await upstream.until(1000)
    const refused = await fetch(`${running.url}/over`)
    expect(refused.status).toBe(503)
    expect(upstream.received).toHaveLength(1000)
    upstream.releaseAll()
    for (const socket of sockets) socket.destroy()
  }, 30_000)

  it('refuses a config whose limit is not a whole number from 0 to 1,000,000, or whose retry_after is not a duration', () => {
    const minimal = { upstreams: { a: { url: 'builtin:echo' } }, routes: [{ id: 'a', path: '/**', upstream: 'a', auth: 'none' }] }
    for (const admission of [{ max_in_flight: -1 }, { max_in_flight: 1.5 }, { max_in_flight: 1_000_001 }, { max_in_flight: 'lots' },
      { retry_after: 'soon' }, { retry_after: 5 }, { max_in_flight: 10, burst: 5 }]) {
      expect(() => loadConfig('portcullis.yaml', stringify({ ...minimal, server: { admission } }), {}), JSON.stringify(admission))
        .toThrow(/server\.admission/)
    }
  })

  it('is on by default, at 10,000 waiting requests a process, with Retry-After 1', () => {
    const minimal = { upstreams: { a: { url: 'builtin:echo' } }, routes: [{ id: 'a', path: '/**', upstream: 'a', auth: 'none' }] }
    const policy = admissionPolicy(loadConfig('portcullis.yaml', stringify(minimal), {}))
    expect(policy.limit).toBe(10_000)
    expect(policy.head).toEqual(expect.arrayContaining(['retry-after', '1']))
    const off = admissionPolicy(loadConfig('portcullis.yaml', stringify({ ...minimal, server: { admission: { max_in_flight: 0 } } }), {}))
    expect(off.limit).toBe(Infinity)
  })

  it('gives every place back: after refusals (404, 405, 401, 413), clients gone mid-wait and upstream failures, one place admits again', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 1 })
    const protectedConfig = loadConfig('portcullis.yaml', stringify({
      ...config(upstream, { max_in_flight: 1 }),
      upstreams: { main: { url: upstream.url, timeout: '10s', connections: 2000 }, gone: { url: 'http://127.0.0.1:1', timeout: '1s' } },
      issuers: [{ issuer: 'https://issuer.invalid/', jwks_uri: 'https://issuer.invalid/jwks', audience: ['a'] }],
      routes: [
        { id: 'open', path: '/open/**', upstream: 'main', auth: 'none', methods: ['GET', 'POST'], max_body_size: '1kb' },
        { id: 'closed', path: '/closed/**', upstream: 'main', scopes: { all: ['x'] } },
        { id: 'down', path: '/down/**', upstream: 'gone', auth: 'none' },
      ],
    }), {})
    expect(await gateway.app.gateway.applyConfig(protectedConfig)).toEqual([])
    for (let i = 0; i < 5; i++) {
      expect((await fetch(`${gateway.url}/nowhere`)).status).toBe(404)
      expect((await fetch(`${gateway.url}/open/x`, { method: 'DELETE' })).status).toBe(405)
      expect((await fetch(`${gateway.url}/closed/x`)).status).toBe(401)
      expect(await rawExchange(gateway.port, 'POST /open/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 5000\r\n\r\n')).toMatch(/^HTTP\/1\.1 413 /)
      expect((await fetch(`${gateway.url}/down/x`)).status).toBe(502)
    }
    // A client that goes away while its request waits at the upstream.
    const socket = await rawRequest(gateway.port, '/open/hold-gone')
    await upstream.until(1)
    socket.destroy()
    await sleep(100)
    const again = fetch(`${gateway.url}/open/hold-again`).then((res) => res.status)
    await upstream.until(2)
    upstream.releaseAll()
    expect(await again).toBe(200)
    expect((await fetch(`${gateway.url}/open/after`)).status).toBe(200)
  })

  it('max_in_flight: 0 turns it off', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 0 })
    const sockets = await Promise.all(Array.from({ length: 1200 }, (_, i) => rawRequest(gateway.port, `/hold-${i}`)))
    await upstream.until(1200)
    upstream.releaseAll()
    for (const socket of sockets) socket.destroy()
  }, 30_000)

  it('a reload changes the limit, and the requests already waiting still count', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 2 })
    const waiting = hold(gateway, 2)
    await upstream.until(2)
    expect((await fetch(`${gateway.url}/shed`)).status).toBe(503)
    const next = loadConfig('portcullis.yaml', stringify(config(upstream, { max_in_flight: 3 })), {})
    expect(await gateway.app.gateway.applyConfig(next)).toEqual([])
    const third = hold(gateway, 1, 2)
    await upstream.until(3)
    expect((await fetch(`${gateway.url}/shed-again`)).status).toBe(503)
    upstream.releaseAll()
    expect(await Promise.all([...waiting, ...third])).toEqual([200, 200, 200])
  })

  it('the decision endpoint sheds too, counting the proxy\'s waiting requests with its own', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 1 }, { decision: { listen: '127.0.0.1:0' } })
    const waiting = hold(gateway, 1)
    await upstream.until(1)
    const refused = await fetch(`${gateway.decisionUrl!}/decide`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/open' } })
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('1')
    upstream.releaseAll()
    await Promise.all(waiting)
    const allowed = await fetch(`${gateway.decisionUrl!}/decide`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/open' } })
    expect(allowed.status).toBe(200)
    expect(upstream.received).toHaveLength(1)
  })

  it('a gRPC call over HTTP/2 past the limit gets UNAVAILABLE (14) in a trailers-only answer', async (context) => {
    const { upstream, gateway } = await start(context, { max_in_flight: 1 }, { server: { http2: { cleartext: true } } })
    const waiting = hold(gateway, 1)
    await upstream.until(1)
    const session = http2.connect(gateway.url)
    context.onTestFinished(() => { session.close() })
    const stream = session.request({ ':method': 'POST', ':path': '/pkg.Service/Method', 'content-type': 'application/grpc', te: 'trailers' })
    stream.end(Buffer.from([0, 0, 0, 0, 0]))
    const headers = await new Promise<http2.IncomingHttpHeaders>((resolve) => stream.on('response', resolve))
    stream.resume()
    await new Promise((resolve) => stream.on('close', resolve))
    expect(headers[':status']).toBe(200)
    expect(headers['grpc-status']).toBe('14')
    upstream.releaseAll()
    await Promise.all(waiting)
    expect(upstream.received).toHaveLength(1)
  })
})

/** One keep-alive HTTP/1.1 request on a socket of its own, left waiting for its answer. */
function rawRequest(port: number, path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    socket.on('error', reject)
    socket.on('connect', () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: gw\r\n\r\n`)
      resolve(socket)
    })
  })
}

/** Writes `text` on a connection of its own and resolves with everything answered until the gateway closes it. */
function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    let answer = ''
    socket.setEncoding('latin1').on('data', (chunk) => { answer += chunk })
    socket.on('error', reject)
    socket.on('close', () => resolve(answer))
    socket.on('connect', () => socket.write(text))
  })
}
