/**
 * Issue 19: OAuth Client ID Metadata Documents at the embedded server, against the real gateway on loopback.
 * The documents come from a real HTTP server on 127.0.0.1, which only `allow_private_addresses` (development)
 * lets the server fetch; the address checks themselves, with injected DNS answers, are in
 * test/authserver/client-metadata/address.test.ts.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { describe, expect, it, type TestContext } from 'vitest'
import * as oauth from 'oauth4webapi'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { ALICE, postForm } from '../../support/authserver.js'
import { FormBrowser, field, responseParams } from '../../support/browser.js'
import { allowRedeemAndRefresh, authorizationUrl } from '../../support/registration.js'
import { listenForTest } from '../../support/upstream.js'

type Gateway = RunningGateway & { issuer: string }
type Handler = (request: IncomingMessage, response: ServerResponse) => void
const insecure = { [oauth.allowInsecureRequests]: true } as const
const LOOPBACK = 'http://127.0.0.1/callback'
const LOCAL_WARNING = 'This application runs on your own computer. Approve only if you just started it yourself.'

interface DocumentServer {
  /** `http://127.0.0.1:<port><path>` */
  url(path: string): string
  /** Requests received, by path. */
  readonly hits: Map<string, number>
  readonly accepts: string[]
  serve(path: string, handler: Handler): void
}

async function startDocumentServer(context: TestContext): Promise<DocumentServer> {
  const handlers = new Map<string, Handler>()
  const hits = new Map<string, number>()
  const accepts: string[] = []
  const server = createServer((request, response) => {
    const path = request.url ?? ''
    hits.set(path, (hits.get(path) ?? 0) + 1)
    accepts.push(request.headers.accept ?? '')
    const handler = handlers.get(path)
    if (handler) handler(request, response)
    else response.writeHead(404).end()
  })
  const port = await listenForTest(server, context)
  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    hits,
    accepts,
    serve: (path, handler) => handlers.set(path, handler),
  }
}

/** A JSON answer, with Cache-Control when given. */
function json(body: unknown, headers: Record<string, string> = {}): Handler {
  return (_request, response) => response.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body))
}

function documentFor(clientId: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { client_id: clientId, client_name: 'Docs CLI', redirect_uris: [LOOPBACK], grant_types: ['authorization_code', 'refresh_token'],
    token_endpoint_auth_method: 'none', scope: 'orders:read', ...extra }
}

async function start(context: TestContext, documents: Record<string, unknown> = {}): Promise<Gateway> {
  const gateway = await startAuthServerGateway({
    access_token: { audience: ['orders-api'] },
    clients: [],
    users: [{ ...ALICE }],
    client_metadata_documents: { enabled: true, allow_private_addresses: true, scopes: ['orders:read', 'orders:write'], ...documents },
  })
  context.onTestFinished(() => gateway.close())
  return gateway
}

async function discover(gateway: Gateway): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(gateway.issuer)
  return oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
}

/** /authorize for a client whose document fails: an error page saying invalid_client, never a redirect. */
async function expectRefusedPage(gateway: Gateway, clientId: string): Promise<string> {
  const res = await new FormBrowser(gateway.url).get((await authorizationUrl(gateway.issuer, clientId)).url)
  expect(res.status).toBe(400)
  expect(res.location).toBeUndefined()
  expect(res.text).toContain('invalid_client')
  const line = gateway.logs.find((entry) => entry.includes('client_id metadata document refused'))
  expect(line).toBeDefined()
  return line!
}

describe('Client ID Metadata Documents', () => {
  it('is off by default: no client_id_metadata_document_supported, and a URL client_id is simply unknown', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.json')
    docs.serve('/client.json', json(documentFor(clientId)))
    const gateway = await startAuthServerGateway({ clients: [], users: [] })
    context.onTestFinished(() => gateway.close())
    expect(await discover(gateway)).not.toHaveProperty('client_id_metadata_document_supported')
    const res = await new FormBrowser(gateway.url).get((await authorizationUrl(gateway.issuer, clientId)).url)
    expect([res.status, res.text.includes('not registered here')]).toEqual([400, true])
    expect(docs.hits.size).toBe(0)
  })

  it('drives authorization code + PKCE with oauth4webapi for a client known only by its document, fetched once within its max-age', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/oauth/client.json')
    docs.serve('/oauth/client.json', json(documentFor(clientId), { 'cache-control': 'public, max-age=3600' }))
    const gateway = await start(context)
    const discovered = await discover(gateway)
    expect(discovered.client_id_metadata_document_supported).toBe(true)
    const as: oauth.AuthorizationServer = { ...discovered, authorization_response_iss_parameter_supported: true }
    const client: oauth.Client = { client_id: clientId }

    const { url, verifier, state, redirectUri } = await authorizationUrl(gateway.issuer, clientId)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get(url)).location!)
    expect(login.text).toContain('Sign in to continue to Docs CLI.')
    const consentRedirect = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    const consent = await browser.get(consentRedirect.location!)
    // Its identity is the host that serves the document, and no more.
    expect(consent.text).toContain('identified only by <strong>127.0.0.1:')
    expect(consent.text).toContain('its name is not verified')
    expect(consent.text).toContain('an application on this computer (127.0.0.1:51004)')
    // MCP Security Considerations: a document client answered only on this computer gets a warning.
    expect(consent.text).toContain(LOCAL_WARNING)
    await allowRedeemAndRefresh({ gateway, browser, consent, as, client, redirectUri, state, verifier, scope: 'orders:read' })

    // A second authorization within max-age: no second fetch. A scope outside the document's is refused as for any client.
    const second = await authorizationUrl(gateway.issuer, clientId)
    expect((await browser.get(second.url)).location).toContain('/consent?')
    const wider = new URL(second.url)
    wider.searchParams.set('scope', 'orders:write')
    expect(responseParams((await browser.get(wider.href)).location).get('error')).toBe('invalid_scope')
    expect(docs.hits.get('/oauth/client.json')).toBe(1)
    expect(docs.accepts).toEqual(['application/json'])
  })

  it('fetches again once max-age has passed, and not before', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/short.json')
    docs.serve('/short.json', json(documentFor(clientId), { 'cache-control': 'max-age=1' }))
    const gateway = await start(context, { cache_ttl: { min: '0s', max: '1h' } })
    const browser = new FormBrowser(gateway.url)
    expect((await browser.get((await authorizationUrl(gateway.issuer, clientId)).url)).location).toContain('/login?')
    expect((await browser.get((await authorizationUrl(gateway.issuer, clientId)).url)).location).toContain('/login?')
    expect(docs.hits.get('/short.json')).toBe(1)
    await new Promise((resolve) => setTimeout(resolve, 1100))
    expect((await browser.get((await authorizationUrl(gateway.issuer, clientId)).url)).location).toContain('/login?')
    expect(docs.hits.get('/short.json')).toBe(2)
  })

  it('refuses a document whose client_id is not the URL it came from', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.json')
    docs.serve('/client.json', json(documentFor(`${clientId}?other`)))
    const gateway = await start(context)
    expect(await expectRefusedPage(gateway, clientId)).toContain('its client_id is not the URL it was fetched from')
  })

  it('answers 401 invalid_client at the token endpoint when the document fails there', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/gone.json')
    docs.serve('/gone.json', (_request, response) => response.writeHead(404).end())
    const gateway = await start(context)
    const res = await postForm(gateway, '/token', { grant_type: 'refresh_token', refresh_token: 'x', client_id: clientId })
    expect([res.status, res.body.error]).toEqual([401, 'invalid_client'])
  })

  it('refuses a redirect_uri the document does not list, with a page', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.json')
    docs.serve('/client.json', json(documentFor(clientId)))
    const gateway = await start(context)
    const res = await new FormBrowser(gateway.url).get((await authorizationUrl(gateway.issuer, clientId, 'https://evil.example/callback')).url)
    expect([res.status, res.location]).toEqual([400, undefined])
    expect(res.text).toContain('The address to return to is not registered for this application')
  })

  it('refuses a document larger than max_size, whether its Content-Length says so or not', async (context) => {
    const docs = await startDocumentServer(context)
    const declared = docs.url('/declared.json')
    const chunked = docs.url('/chunked.json')
    const padding = 'x'.repeat(2000)
    docs.serve('/declared.json', json(documentFor(declared, { padding })))
    docs.serve('/chunked.json', (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write(JSON.stringify(documentFor(chunked)).slice(0, -1))
      response.end(`,"padding":"${padding}"}`)
    })
    const gateway = await start(context, { max_size: '1kb' })
    expect(await expectRefusedPage(gateway, declared)).toContain('is larger than max_size (1024 bytes)')
    gateway.logs.length = 0
    expect(await expectRefusedPage(gateway, chunked)).toContain('is larger than max_size (1024 bytes)')
  })

  it('gives up on a document slower than timeout', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/slow.json')
    docs.serve('/slow.json', (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write('{')
      // Never finished: the body trickles past the timeout.
    })
    const gateway = await start(context, { timeout: '300ms' })
    const started = Date.now()
    expect(await expectRefusedPage(gateway, clientId)).toContain('could not be fetched (TimeoutError')
    expect(Date.now() - started).toBeLessThan(3000)
  })

  it('honours dpop_bound_access_tokens (RFC 9449 §5.2): a code redeemed without a proof is refused, with one the token is DPoP; a non-boolean refuses the document', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/dpop/client.json')
    docs.serve('/dpop/client.json', json(documentFor(clientId, { dpop_bound_access_tokens: true })))
    const gateway = await start(context)
    const as: oauth.AuthorizationServer = { ...await discover(gateway), authorization_response_iss_parameter_supported: true }
    const client: oauth.Client = { client_id: clientId }
    const insecure = { [oauth.allowInsecureRequests]: true }
    /** A code for `clientId`, through login and consent. */
    const code = async () => {
      const { url, verifier, state, redirectUri } = await authorizationUrl(gateway.issuer, clientId)
      const browser = new FormBrowser(gateway.url)
      const login = await browser.get((await browser.get(url)).location!)
      const consentRedirect = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
      const consent = await browser.get(consentRedirect.location!)
      const callback = await browser.post('/consent', { _csrf: field(consent, '_csrf'), interaction: field(consent, 'interaction'), decision: 'allow' })
      return { params: oauth.validateAuthResponse(as, client, new URL(callback.location!), state), verifier, redirectUri }
    }
    const bare = await code()
    const refused = await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), bare.params, bare.redirectUri, bare.verifier, insecure)
    expect(refused.status).toBe(400)
    expect(await refused.json()).toMatchObject({ error: 'invalid_request', error_description: expect.stringContaining('dpop_bound_access_tokens') })
    const bound = await code()
    const DPoP = oauth.DPoP(client, await oauth.generateKeyPair('ES256'))
    const request = () => oauth.authorizationCodeGrantRequest(as, client, oauth.None(), bound.params, bound.redirectUri, bound.verifier, { DPoP, ...insecure })
    const tokens = await oauth.processAuthorizationCodeResponse(as, client, await request())
    expect(tokens.token_type).toBe('dpop')

    const badId = docs.url('/dpop/bad.json')
    docs.serve('/dpop/bad.json', json(documentFor(badId, { dpop_bound_access_tokens: 'yes' })))
    expect(await expectRefusedPage(gateway, badId)).toContain('dpop_bound_access_tokens must be true or false')
  })

  it('refuses a document that is not application/json', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.html')
    docs.serve('/client.html', (_request, response) =>
      response.writeHead(200, { 'content-type': 'text/html' }).end(JSON.stringify(documentFor(clientId))))
    const gateway = await start(context)
    expect(await expectRefusedPage(gateway, clientId)).toContain('is not application/json')
  })

  it('follows no redirect: a 302 to a good document is refused, and its target never fetched', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/moved.json')
    docs.serve('/moved.json', (_request, response) => response.writeHead(302, { location: docs.url('/target.json') }).end())
    docs.serve('/target.json', json(documentFor(clientId)))
    const gateway = await start(context)
    expect(await expectRefusedPage(gateway, clientId)).toContain('answered 302')
    expect(docs.hits.get('/target.json')).toBeUndefined()
  })

  it('refuses loopback and private targets unless allow_private_addresses, and http anywhere', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.json')
    docs.serve('/client.json', json(documentFor(clientId)))
    const gateway = await start(context, { allow_private_addresses: false })
    // http is only ever allowed on loopback with allow_private_addresses.
    expect(await expectRefusedPage(gateway, clientId)).toContain('must use https')
    gateway.logs.length = 0
    // An https URL naming a loopback literal is refused before any connection is attempted.
    expect(await expectRefusedPage(gateway, clientId.replace('http:', 'https:'))).toContain('could not be fetched (RefusedAddress: 127.0.0.1 is not a public address)')
    expect(docs.hits.size).toBe(0)
  })

  it('refuses a host not in allowed_hosts, before fetching', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/client.json')
    docs.serve('/client.json', json(documentFor(clientId)))
    const gateway = await start(context, { allowed_hosts: ['*.example.com', 'clients.example.org'] })
    expect(await expectRefusedPage(gateway, clientId)).toContain('names a host not in allowed_hosts')
    expect(docs.hits.size).toBe(0)
  })

  it('refuses documents that ask for a secret, another grant, or no redirect URI', async (context) => {
    const docs = await startDocumentServer(context)
    const gateway = await start(context)
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/jwt.json', { token_endpoint_auth_method: 'private_key_jwt' }, 'token_endpoint_auth_method must be none'],
      ['/secret.json', { client_secret: 'x' }, 'must not contain client_secret'],
      ['/cc.json', { grant_types: ['client_credentials'] }, 'grant_types must include authorization_code'],
      ['/none.json', { redirect_uris: [] }, 'redirect_uris must be an array'],
      ['/bad-uri.json', { redirect_uris: ['javascript:alert(1)'] }, 'a redirect URI must not use the javascript: scheme'],
    ]
    for (const [path, extra, reason] of cases) {
      docs.serve(path, json(documentFor(docs.url(path), extra)))
      gateway.logs.length = 0
      expect(await expectRefusedPage(gateway, docs.url(path))).toContain(reason)
    }
  })

  it('refuses a localhost redirect URI unless redirect_uris lists localhost (issue 19), and its look-alikes even then', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/localhost.json')
    docs.serve('/localhost.json', json(documentFor(clientId, { redirect_uris: ['http://localhost/callback'] })))
    const closed = await start(context)
    expect(await expectRefusedPage(closed, clientId)).toContain('localhost redirect URIs may not be registered here')

    const open = await start(context, { redirect_uris: ['loopback', 'localhost', 'https', 'private_use'] })
    // A port of the client's choosing, as for loopback IP literals; never the other host.
    const browser = new FormBrowser(open.url)
    expect((await browser.get((await authorizationUrl(open.issuer, clientId, 'http://localhost:51004/callback')).url)).location).toContain('/login?')
    const swapped = await browser.get((await authorizationUrl(open.issuer, clientId, 'http://127.0.0.1:51004/callback')).url)
    expect([swapped.status, swapped.location]).toEqual([400, undefined])
    const alikes = ['http://LOCALHOST/callback', 'http://localhost./callback', 'http://localhost.evil.com/callback', 'http://127.0.0.1.nip.io/callback',
      'http://user@localhost/callback', 'http://localhost:0/callback', 'http://localhost:05555/callback', 'http://localhos%74/callback']
    for (const [index, uri] of alikes.entries()) {
      const path = `/alike-${index}.json`
      docs.serve(path, json(documentFor(docs.url(path), { redirect_uris: [uri] })))
      open.logs.length = 0
      expect(await expectRefusedPage(open, docs.url(path)), uri).toContain('a redirect URI ')
    }
  })

  it('keeps every form but localhost by default, and only the listed ones when redirect_uris is set', async (context) => {
    const docs = await startDocumentServer(context)
    const mixed = docs.url('/mixed.json')
    docs.serve('/mixed.json', json(documentFor(mixed, { redirect_uris: ['https://app.example.com/callback', LOOPBACK, 'com.example.app:/callback'] })))
    const gateway = await start(context)
    expect((await new FormBrowser(gateway.url).get((await authorizationUrl(gateway.issuer, mixed)).url)).location).toContain('/login?')
    const httpsOnly = await start(context, { redirect_uris: ['https'] })
    expect(await expectRefusedPage(httpsOnly, mixed)).toContain('loopback redirect URIs may not be registered here')
  })

  it('does not warn on the consent page for a document client that can also be answered over https', async (context) => {
    const docs = await startDocumentServer(context)
    const clientId = docs.url('/web.json')
    docs.serve('/web.json', json(documentFor(clientId, { redirect_uris: ['https://app.example.com/callback', LOOPBACK] })))
    const gateway = await start(context)
    const browser = new FormBrowser(gateway.url)
    const login = await browser.get((await browser.get((await authorizationUrl(gateway.issuer, clientId)).url)).location!)
    const consent = await browser.get((await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })).location!)
    expect(consent.text).toContain('identified only by <strong>127.0.0.1:')
    expect(consent.text).not.toContain(LOCAL_WARNING)
  })
})
