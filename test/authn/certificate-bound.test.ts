/**
 * Certificate-bound access tokens (RFC 8705) with real TLS client certificates from a test CA: the embedded
 * server authenticates `tls_client_auth` (PKI: chain, subject DN or DNS name) and `self_signed_tls_client_auth`
 * clients by their certificate and binds their access tokens to it (`cnf.x5t#S256`), advertised in metadata;
 * the gateway's bind stage accepts such a token only over a connection that presented that certificate, and
 * refuses (fails closed) a token whose `cnf` it cannot check. Every refusal proves the upstream was not reached.
 */
import { createHash, X509Certificate } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Agent } from 'undici'
import { decodeJwt } from 'jose'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'
import { createSelfSignedCertificate, createTestCa, type IssuedCertificate, type TestCa } from '../support/tls.js'
import { closedPort, startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const thumbprint = (pem: string) => createHash('sha256').update(new X509Certificate(pem).raw).digest('base64url')

let ca: TestCa
let upstream: RecordingUpstream
let issuer: TestIssuer
let gateway: RunningGateway
let plain: RunningGateway
let certs: { orders: IssuedCertificate; dns: IssuedCertificate; other: IssuedCertificate; foreign: IssuedCertificate; cli: IssuedCertificate }
let foreignCa: TestCa
const agents: Agent[] = []

/** An agent that trusts the test CA and presents `cert` (none when undefined). */
function agent(cert?: IssuedCertificate): Agent {
  const made = new Agent({ connect: { ca: ca.ca, ...(cert && { cert: cert.cert, key: cert.key }) } })
  agents.push(made)
  return made
}

type Init = Omit<RequestInit, 'dispatcher'> & { dispatcher?: Agent }

async function send(url: string, init: Init) {
  const response = await fetch(url, init as unknown as RequestInit)
  const text = await response.text()
  let body: Record<string, unknown> = {}
  try { body = JSON.parse(text) as Record<string, unknown> } catch { /* not JSON */ }
  return { status: response.status, body, challenge: response.headers.get('www-authenticate') }
}

const token = (client: string, cert?: IssuedCertificate) => send(`${gateway.url}/token`, {
  method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams({ grant_type: 'client_credentials', client_id: client }).toString(), dispatcher: agent(cert),
})

async function callApi(target: RunningGateway, bearer: string, cert?: IssuedCertificate, extra: Record<string, string> = {}) {
  const before = upstream.requests.length
  const answer = await send(`${target.url}/api/x`, { headers: { authorization: `Bearer ${bearer}`, ...extra }, dispatcher: agent(cert) })
  return { ...answer, reached: upstream.requests.length > before }
}

beforeAll(async () => {
  ca = createTestCa()
  foreignCa = createTestCa('Someone Else CA')
  certs = {
    orders: ca.issue('orders-service', ['DNS:orders-service.internal']),
    dns: ca.issue('dns-service', ['DNS:orders.internal']),
    other: ca.issue('other-service', ['DNS:other.internal']),
    // The right name, from a CA the gateway does not trust.
    foreign: foreignCa.issue('orders-service', ['DNS:orders.internal']),
    cli: createSelfSignedCertificate('cli-tool'),
  }
  const server = ca.issue('gateway')
  ;[upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const port = await closedPort()
  const url = `https://127.0.0.1:${port}`
  const routes = [{ id: 'api', path: '/api/**', upstream: 'main', scopes: { all: ['orders:read'] } }]
  const base = testConfig({ upstream, issuer, routes })
  gateway = await startGateway({
    ...base,
    server: { realm: 'test', public_url: url, tls: { cert_file: server.certFile, key_file: server.keyFile, client_certificates: 'request', client_ca_file: ca.caFile } },
    forward: { client_certificate_header: 'X-Client-Cert-Subject' },
    authorization_server: {
      enabled: true, issuer: url, store: { type: 'memory' }, access_token: { audience: [issuer.audience] },
      clients: [
        { client_id: 'orders-service', token_endpoint_auth_method: 'tls_client_auth', tls_client_auth_subject_dn: 'CN=orders-service',
          grant_types: ['client_credentials'], scopes: ['orders:read'] },
        { client_id: 'dns-service', token_endpoint_auth_method: 'tls_client_auth', tls_client_auth_san_dns: 'orders.internal',
          grant_types: ['client_credentials'], scopes: ['orders:read'] },
        { client_id: 'cli', token_endpoint_auth_method: 'self_signed_tls_client_auth', self_signed_certificate_file: certs.cli.certFile,
          grant_types: ['client_credentials'], scopes: ['orders:read'] },
        { client_id: 'secret-service', client_secret: 'secret-service-secret-0123', grant_types: ['client_credentials'], scopes: ['orders:read'] },
      ],
    },
    decision: { listen: '127.0.0.1:0' },
  }, { port })
  // The same routes on a listener that asks for no certificate.
  plain = await startGateway(base)
}, 60_000)

afterAll(async () => {
  await Promise.all([gateway?.close(), plain?.close()])
  await Promise.all(agents.map((made) => made.close()))
  await Promise.all([upstream?.close(), issuer?.close()])
  ca?.remove()
  foreignCa?.remove()
})

describe('the embedded server (RFC 8705 §2)', () => {
  it('advertises certificate authentication and certificate-bound tokens', async () => {
    const metadata = await send(`${gateway.url}/.well-known/oauth-authorization-server`, { dispatcher: agent() })
    expect(metadata.body.token_endpoint_auth_methods_supported).toEqual(expect.arrayContaining(['tls_client_auth', 'self_signed_tls_client_auth']))
    expect(metadata.body.tls_client_certificate_bound_access_tokens).toBe(true)
  })

  it('tls_client_auth by subject DN and by DNS name: a token bound to the certificate presented', async () => {
    for (const [client, cert] of [['orders-service', certs.orders], ['dns-service', certs.dns]] as const) {
      const issued = await token(client, cert)
      expect(issued.status, client).toBe(200)
      expect(issued.body.token_type).toBe('Bearer')
      expect(decodeJwt(issued.body.access_token as string).cnf).toEqual({ 'x5t#S256': thumbprint(cert.cert) })
    }
  })

  it('self_signed_tls_client_auth: the registered certificate, and no other', async () => {
    const issued = await token('cli', certs.cli)
    expect(issued.status).toBe(200)
    expect(decodeJwt(issued.body.access_token as string).cnf).toEqual({ 'x5t#S256': thumbprint(certs.cli.cert) })
    expect((await token('cli', certs.orders)).body.error).toBe('invalid_client')
  })

  it('refuses (invalid_client) no certificate, another client\'s, one from an untrusted CA, and a secret in its place', async () => {
    for (const [cert, why] of [[undefined, 'none'], [certs.other, 'other'], [certs.foreign, 'untrusted CA']] as const) {
      const refused = await token('orders-service', cert)
      expect([refused.status, refused.body.error], why).toEqual([401, 'invalid_client'])
    }
    expect((await token('dns-service', certs.foreign)).body.error).toBe('invalid_client')
    const withSecret = await send(`${gateway.url}/token`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, dispatcher: agent(certs.orders),
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: 'orders-service', client_secret: 'anything-at-all-0123456' }).toString(),
    })
    expect(withSecret.body.error).toBe('invalid_client')
    const audit = gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === 'client.authentication_failed')
    expect(audit.some((line) => line.reason === 'wrong_certificate')).toBe(true)
  })

  it('a client with a secret still gets a plain Bearer token over the same listener', async () => {
    const issued = await send(`${gateway.url}/token`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, dispatcher: agent(certs.orders),
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: 'secret-service', client_secret: 'secret-service-secret-0123' }).toString(),
    })
    expect(decodeJwt(issued.body.access_token as string).cnf).toBeUndefined()
  })
})

describe('the gateway (RFC 8705 §3)', () => {
  it('passes a bound token only with its certificate; the upstream learns the subject under the configured header', async () => {
    const bound = (await token('orders-service', certs.orders)).body.access_token as string
    const passed = await callApi(gateway, bound, certs.orders, { 'x-client-cert-subject': 'CN=spoofed' })
    expect(passed).toMatchObject({ status: 200, reached: true })
    expect(upstream.requests.at(-1)!.headers['x-client-cert-subject']).toBe('CN=orders-service')
    for (const [cert, why] of [[undefined, 'no certificate'], [certs.other, 'another certificate'], [certs.cli, 'a self-signed one']] as const) {
      const refused = await callApi(gateway, bound, cert)
      expect(refused, why).toMatchObject({ status: 401, reached: false })
      expect(refused.challenge).toMatch(/error="invalid_token"/)
    }
    expect(gateway.logs.join('\n')).toContain('certificate_bound')
  })

  it('a subject outside printable ASCII (and a %) reaches the upstream percent-encoded, never as raw bytes', async () => {
    const odd = createSelfSignedCertificate('Zürich%ops')
    try {
      const bound = await issuer.sign({ scope: 'orders:read', cnf: { 'x5t#S256': thumbprint(odd.cert) } })
      expect(await callApi(gateway, bound, odd)).toMatchObject({ status: 200, reached: true })
      expect(upstream.requests.at(-1)!.headers['x-client-cert-subject']).toBe('CN=Z%C3%BCrich%25ops')
    } finally {
      odd.remove()
    }
  })

  it('a Bearer token is untouched by a certificate, and never gets the subject header', async () => {
    const plainToken = await issuer.sign({ scope: 'orders:read' })
    expect(await callApi(gateway, plainToken, certs.orders, { 'x-client-cert-subject': 'CN=spoofed' })).toMatchObject({ status: 200, reached: true })
    expect(upstream.requests.at(-1)!.headers['x-client-cert-subject']).toBeUndefined()
  })

  it('a bound token from any issuer: refused on a listener that asks for no certificate, and at the decision endpoint', async () => {
    const bound = await issuer.sign({ scope: 'orders:read', cnf: { 'x5t#S256': thumbprint(certs.orders.cert) } })
    expect(await callApi(gateway, bound, certs.orders)).toMatchObject({ status: 200, reached: true })
    expect(await callApi(plain, bound)).toMatchObject({ status: 401, reached: false })
    const decided = await fetch(`${gateway.decisionUrl!}/decide`, {
      headers: { 'x-original-method': 'GET', 'x-original-uri': '/api/x', authorization: `Bearer ${bound}` },
    })
    expect(decided.status).toBe(401)
  })

  it('fails closed on a confirmation it does not check: cnf.jwk, cnf.x5t (SHA-1), a malformed thumbprint', async () => {
    for (const cnf of [{ jwk: { kty: 'EC' } }, { x5t: 'c29tZS1zaGExLXRodW1icHJpbnQ' }, { 'x5t#S256': 'short' }, { 'x5t#S256': thumbprint(certs.orders.cert), kid: 'k1' }]) {
      const refused = await callApi(gateway, await issuer.sign({ scope: 'orders:read', cnf }), certs.orders)
      expect(refused, JSON.stringify(cnf)).toMatchObject({ status: 401, reached: false })
    }
  })
})
