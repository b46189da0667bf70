/**
 * Which `Origin` values the gateway allows (issue 18): exact origins, the `https://*.example.com` pattern against
 * the look-alikes it must never match, ports and schemes, `*`; and that nothing a client sends as its origin is
 * ever echoed unless it is exactly an allowed one (CR/LF, folding, lists, duplicates).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

const ORIGINS = ['https://*.example.com', 'https://*.example.net:8443', 'http://localhost:5173', 'http://[::1]:3000', 'https://app.example.org']

let upstream: RecordingUpstream
let gateway: RunningGateway
let star: RunningGateway
beforeAll(async () => {
  upstream = await startRecordingUpstream()
  const routes = [{ id: 'public', path: '/public/**', upstream: 'main', auth: 'none' }]
  gateway = await startGateway({ ...testConfig({ upstream, routes }), cors: { allowed_origins: ORIGINS } })
  star = await startGateway({ ...testConfig({ upstream, routes }), cors: { allowed_origins: ['*'], allowed_headers: ['*'] } })
})
afterAll(async () => {
  await Promise.all([gateway.close(), star.close()])
  await upstream.close()
})

async function preflightStatus(target: RunningGateway, origin: string): Promise<number> {
  const res = await fetch(`${target.url}/public/x`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'GET' } })
  return res.status
}

async function allowOrigin(target: RunningGateway, origin: string): Promise<string | null> {
  const res = await fetch(`${target.url}/public/x`, { headers: { origin } })
  expect(res.status).toBe(200)
  return res.headers.get('access-control-allow-origin')
}

describe('the pattern https://*.example.com', () => {
  it.each([
    'https://a.example.com', 'https://a.b.example.com', 'https://xn--bcher-kva.example.com', 'https://a-1.example.com',
    'https://a.example.net:8443', 'http://localhost:5173', 'http://[::1]:3000', 'https://app.example.org',
  ])('allows %s, echoed as sent', async (origin) => {
    expect(await preflightStatus(gateway, origin)).toBe(204)
    expect(await allowOrigin(gateway, origin)).toBe(origin)
  })

  it.each([
    'https://evil-example.com', 'https://example.com.evil.com', 'https://example.com', 'https://a.example.com.',
    'https://user@a.example.com', 'https://a.example.com/path', 'https://a.example.com/', 'http://a.example.com',
    'https://a.example.com:8443', 'https://a.example.com:443', 'https://a.example.net', 'https://a.example.net:8444',
    'https://A.example.com', 'https://.example.com', 'https://a..example.com', 'https://*.example.com', 'https://-a.example.com',
    'https://a.example.com, https://b.example.com', 'https://a.example.com https://b.example.com', 'null', '',
    'http://localhost:5174', 'http://localhost', 'https://app.example.org.evil.com', 'https://app.example.orgx',
    `https://${'a'.repeat(64)}.example.com`, `https://${'a.'.repeat(200)}example.com`,
  ])('refuses %j: preflight 403, and no Access-Control-Allow-Origin', async (origin) => {
    expect(await preflightStatus(gateway, origin)).toBe(403)
    expect(await allowOrigin(gateway, origin)).toBeNull()
  })
})

describe('what a client sends as its origin is never echoed unless allowed', () => {
  const head = (origin: string) => `GET /public/x HTTP/1.1\r\nHost: 127.0.0.1\r\n${origin}Connection: close\r\n\r\n`

  it.each([
    ['a bare LF', 'Origin: https://a.example.com\nX-Injected: yes\r\n'],
    ['a folded line', 'Origin: https://a.example.com\r\n x-injected: yes\r\n'],
    ['two Origin headers', 'Origin: https://a.example.com\r\nOrigin: https://evil.com\r\n'],
    ['a tab', 'Origin: https://a.example.com\tx\r\n'],
    ['latin-1 bytes', 'Origin: https://\xe9.example.com\r\n'],
  ])('%s', async (_name, origin) => {
    const res = await rawRequest(gateway.port, head(origin))
    expect(res.headers).not.toMatch(/^access-control-allow-(origin|credentials)/im)
    expect(res.headers).not.toMatch(/^x-injected/im)
  })

  it('the same head with one clean Origin is allowed (so the refusals above are the origin\'s doing)', async () => {
    const res = await rawRequest(gateway.port, head('Origin: https://a.example.com\r\n'))
    expect(res.headers).toMatch(/^access-control-allow-origin: https:\/\/a\.example\.com$/im)
  })

  it('a CR LF ends the Origin: what follows is another request header, never part of the answer', async () => {
    const res = await rawRequest(gateway.port, head('Origin: https://a.example.com\r\nAccess-Control-Allow-Credentials: true\r\nX-Injected: yes\r\n'))
    expect(res.headers).toMatch(/^access-control-allow-origin: https:\/\/a\.example\.com$/im)
    expect(res.headers).not.toMatch(/^(access-control-allow-credentials|x-injected)/im)
  })
})

describe('"*"', () => {
  it('answers "*" to every origin, "null" included, never the origin itself and never with credentials', async () => {
    for (const origin of ['https://any.example', 'null', 'https://a.example.com\tx']) {
      const res = await fetch(`${star.url}/public/x`, { headers: { origin } })
      expect(res.headers.get('access-control-allow-origin')).toBe('*')
      expect(res.headers.get('access-control-allow-credentials')).toBeNull()
    }
  })

  it('with allowed_headers: ["*"], a preflight gets the headers it asked for named back (Authorization included)', async () => {
    const res = await fetch(`${star.url}/public/x`, { method: 'OPTIONS',
      headers: { origin: 'https://any.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'Authorization,X-Custom' } })
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-origin')).toBe('*')
    expect(res.headers.get('access-control-allow-headers')).toBe('authorization, x-custom')
    const bad = await fetch(`${star.url}/public/x`, { method: 'OPTIONS',
      headers: { origin: 'https://any.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'x-ok, bad(name)' } })
    expect(bad.status).toBe(403)
  })

  it('no preflight above reached the upstream', () => {
    expect(upstream.requests.filter((request) => request.method === 'OPTIONS')).toHaveLength(0)
  })
})
