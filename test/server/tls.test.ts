/**
 * HTTPS (issue 2, point 9): `server.tls` on the public listener (TLS 1.2 minimum, HTTP/1.1 over ALPN),
 * and https upstreams verified against the system CAs or `ca_file` — never unverified. Certificates are
 * made at test time by a private CA (test/support/tls.ts).
 */
import tls from 'node:tls'
import { writeFileSync } from 'node:fs'
import path from 'node:path'
import { Agent, request } from 'undici'
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest'
import WebSocket from 'ws'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { createTestCa, type IssuedCertificate, type TestCa } from '../support/tls.js'

let ca: TestCa
let otherCa: TestCa
let gatewayCert: IssuedCertificate
let upstreamCert: IssuedCertificate
let wrongNameCert: IssuedCertificate

beforeAll(() => {
  ca = createTestCa()
  otherCa = createTestCa('Some Other CA')
  gatewayCert = ca.issue('gateway')
  upstreamCert = ca.issue('upstream')
  wrongNameCert = ca.issue('wrong-name', ['DNS:upstream.internal'])
})
afterAll(() => { ca.remove(); otherCa.remove() })

interface Setup {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
  authorization: string
}

async function setup(onTestFinished: TestContext['onTestFinished'], options: {
  listenerTls?: boolean
  upstreamTls?: IssuedCertificate
  caFile?: string
  http2?: boolean
}): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([
    startRecordingUpstream(options.upstreamTls ? { tls: { cert: options.upstreamTls.cert, key: options.upstreamTls.key } } : {}),
    startTestIssuer(),
  ])
  const gateway = await startGateway(testConfig({
    upstream,
    issuer,
    ...(options.listenerTls && { server: {
      tls: { cert_file: gatewayCert.certFile, key_file: gatewayCert.keyFile },
      ...(options.http2 === false && { http2: { enabled: false } }),
    } }),
    ...(options.caFile && { upstreamExtra: { ca_file: options.caFile } }),
  }))
  onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
  return { upstream, issuer, gateway, authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` }
}

/** An undici client that trusts exactly `trusted` (or the system CAs when undefined). */
function clientTrusting(onTestFinished: TestContext['onTestFinished'], trusted?: string): Agent {
  const agent = new Agent({ connect: trusted === undefined ? {} : { ca: trusted } })
  onTestFinished(() => agent.close())
  return agent
}

/** A bare TLS handshake with the gateway; resolves with the session or rejects with OpenSSL's reason. */
function handshake(port: number, options: tls.ConnectionOptions): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.ca, ...options }, () => resolve(socket))
    socket.once('error', reject)
  })
}

describe('tls: the public listener', () => {
  it('serves HTTPS with the configured certificate to a client that trusts the private CA', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { listenerTls: true })
    expect(gateway.url).toMatch(/^https:\/\//)
    const res = await request(`${gateway.url}/orders/1?x=1`, { headers: { authorization }, dispatcher: clientTrusting(onTestFinished, ca.ca) })
    expect(res.statusCode).toBe(200)
    expect(await res.body.json()).toMatchObject({ ok: true, url: '/orders/1?x=1' })
    // The upstream learns the client came over HTTPS.
    expect(upstream.requests[0]!.headers['x-forwarded-proto']).toBe('https')
    expect(upstream.requests[0]!.headers['x-auth-subject']).toBe('user-1')
  })

  it('presents a certificate a client that does not trust the CA refuses', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { listenerTls: true })
    await expect(request(`${gateway.url}/orders`, { headers: { authorization }, dispatcher: clientTrusting(onTestFinished, otherCa.ca) }))
      .rejects.toMatchObject({ code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' })
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers a bad token over TLS with the same RFC 6750 challenge', async ({ onTestFinished }) => {
    const { upstream, gateway } = await setup(onTestFinished, { listenerTls: true })
    const res = await request(`${gateway.url}/orders`, { dispatcher: clientTrusting(onTestFinished, ca.ca) })
    expect(res.statusCode).toBe(401)
    expect(res.headers['www-authenticate']).toBe('Bearer realm="test"')
    await res.body.dump()
    expect(upstream.requests).toHaveLength(0)
  })

  it('negotiates TLS 1.2 and 1.3 but refuses TLS 1.1 and 1.0', async ({ onTestFinished }) => {
    const { gateway } = await setup(onTestFinished, { listenerTls: true })
    for (const version of ['TLSv1.2', 'TLSv1.3'] as const) {
      const socket = await handshake(gateway.port, { minVersion: version, maxVersion: version })
      expect(socket.getProtocol()).toBe(version)
      socket.destroy()
    }
    for (const version of ['TLSv1', 'TLSv1.1'] as const) {
      // SECLEVEL=0 lets this client offer the old versions at all; the refusal must come from the gateway.
      const attempt = handshake(gateway.port, { minVersion: version, maxVersion: version, ciphers: 'DEFAULT:@SECLEVEL=0' })
      await expect(attempt, version).rejects.toMatchObject({ code: 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION' })
    }
  })

  it('offers h2, then http/1.1, over ALPN (server.http2); http/1.1 alone with server.http2.enabled: false', async ({ onTestFinished }) => {
    const { gateway } = await setup(onTestFinished, { listenerTls: true })
    const socket = await handshake(gateway.port, { ALPNProtocols: ['h2', 'http/1.1'] })
    expect(socket.alpnProtocol).toBe('h2')
    socket.destroy()
    const http1 = await handshake(gateway.port, { ALPNProtocols: ['http/1.1'] })
    expect(http1.alpnProtocol).toBe('http/1.1')
    http1.destroy()
    const withoutAlpn = await handshake(gateway.port, {})
    expect(withoutAlpn.alpnProtocol).toBe(false)
    withoutAlpn.destroy()
    const { gateway: http1Only } = await setup(onTestFinished, { listenerTls: true, http2: false })
    const offered = await handshake(http1Only.port, { ALPNProtocols: ['h2', 'http/1.1'] })
    expect(offered.alpnProtocol).toBe('http/1.1')
    offered.destroy()
  })

  it('never answers plain HTTP on the TLS listener', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { listenerTls: true })
    const res = await rawRequest(gateway.port, `GET /orders HTTP/1.1\r\nHost: gw\r\nAuthorization: ${authorization}\r\nConnection: close\r\n\r\n`)
    expect(res.status).not.toBe(200)
    expect(res.raw).not.toContain('"ok":true')
    expect(upstream.requests).toHaveLength(0)
  })

  it('forwards a WebSocket upgrade that arrives over TLS', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { listenerTls: true })
    const ws = new WebSocket(`${gateway.url.replace(/^https/, 'wss')}/stream`, { headers: { authorization }, ca: ca.ca })
    onTestFinished(() => { ws.terminate() })
    const hello = await new Promise<string>((resolve, reject) => {
      ws.once('message', (data) => resolve(String(data)))
      ws.once('error', reject)
    })
    expect(JSON.parse(hello)).toEqual({ hello: true, subject: 'user-1' })
    expect(upstream.upgrades[0]!['x-forwarded-proto']).toBe('https')
  })
})

describe('tls: https upstreams', () => {
  it('forwards to an https upstream whose private CA is given as ca_file', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: upstreamCert, caFile: ca.caFile })
    expect(upstream.url).toMatch(/^https:\/\//)
    const body = JSON.stringify({ over: 'tls' })
    const res = await fetch(`${gateway.url}/orders?via=tls`, { method: 'POST', headers: { authorization, 'content-type': 'application/json' }, body })
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ ok: true, url: '/orders?via=tls', bodyBytes: body.length })
    expect(upstream.requests[0]!.headers['x-auth-subject']).toBe('user-1')
  })

  it('answers 502 when the https upstream\'s CA is not trusted: verification is on without ca_file', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: upstreamCert })
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization } })
    expect(res.status).toBe(502)
    expect(await res.json()).toEqual({ error: 'bad_gateway', error_description: 'the upstream could not be reached' })
    expect(upstream.requests).toHaveLength(0)
    expect(gateway.logs.join('')).toContain('UNABLE_TO_VERIFY_LEAF_SIGNATURE')
  })

  it('answers 502 when ca_file names a different CA than the one that signed the upstream', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: upstreamCert, caFile: otherCa.caFile })
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization } })
    expect(res.status).toBe(502)
    expect(upstream.requests).toHaveLength(0)
  })

  it('answers 502 when the upstream certificate does not name the upstream host, even from the trusted CA', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: wrongNameCert, caFile: ca.caFile })
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization } })
    expect(res.status).toBe(502)
    expect(upstream.requests).toHaveLength(0)
    expect(gateway.logs.join('')).toContain('ERR_TLS_CERT_ALTNAME_INVALID')
  })

  it('resolves a relative ca_file against the config file\'s directory', async ({ onTestFinished }) => {
    const [upstream, issuer] = await Promise.all([
      startRecordingUpstream({ tls: { cert: upstreamCert.cert, key: upstreamCert.key } }), startTestIssuer()])
    writeFileSync(path.join(ca.dir, 'relative-ca.pem'), ca.ca)
    const gateway = await startGateway(testConfig({ upstream, issuer, upstreamExtra: { ca_file: 'relative-ca.pem' } }), { dir: ca.dir })
    onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
    const res = await fetch(`${gateway.url}/orders`, { headers: { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` } })
    expect(res.status).toBe(200)
  })

  it('forwards a WebSocket upgrade to a wss upstream verified with ca_file', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: upstreamCert, caFile: ca.caFile })
    const ws = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/stream`, { headers: { authorization } })
    onTestFinished(() => { ws.terminate() })
    const messages: string[] = []
    await new Promise<void>((resolve, reject) => {
      ws.on('message', (data) => {
        messages.push(String(data))
        if (messages.length === 1) ws.send('over-tls')
        else resolve()
      })
      ws.once('error', reject)
    })
    expect(messages).toEqual([JSON.stringify({ hello: true, subject: 'user-1' }), 'echo:over-tls'])
    expect(upstream.upgrades).toHaveLength(1)
  })

  it('refuses a WebSocket upgrade to a wss upstream it cannot verify with 502', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { upstreamTls: upstreamCert })
    const status = await new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/stream`, { headers: { authorization } })
      ws.once('open', () => reject(new Error('the upgrade was accepted')))
      ws.once('error', () => { /* reported through unexpected-response */ })
      ws.once('unexpected-response', (_req, res) => { resolve(res.statusCode!); ws.terminate() })
    })
    expect(status).toBe(502)
    expect(upstream.upgrades).toHaveLength(0)
  })

  it('carries a request end to end over TLS on both sides', async ({ onTestFinished }) => {
    const { upstream, gateway, authorization } = await setup(onTestFinished, { listenerTls: true, upstreamTls: upstreamCert, caFile: ca.caFile })
    const res = await request(`${gateway.url}/orders/e2e`, { headers: { authorization }, dispatcher: clientTrusting(onTestFinished, ca.ca) })
    expect(res.statusCode).toBe(200)
    expect(await res.body.json()).toMatchObject({ ok: true, url: '/orders/e2e' })
    expect(upstream.requests[0]!.headers['x-forwarded-proto']).toBe('https')
  })
})
