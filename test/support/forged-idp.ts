/**
 * A provider the test controls down to the byte, for the abuse suites: discovery, a JWKS, an authorization
 * endpoint that approves at once (redirecting to the callback with a code, the state and `iss`), and a token
 * endpoint whose ID token is whatever the test makes of it (claims, signing key, alg). Everything it was asked
 * is recorded. Signs with jose (ES256).
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose'

export interface ForgedIdp {
  readonly issuer: string
  /** The authorization requests received (their parameters). */
  readonly authorizations: URLSearchParams[]
  /** The token requests received (their form). */
  readonly tokenRequests: URLSearchParams[]
  /** What the authorization endpoint sends back to the callback; default: a code, the state, `iss`. */
  callback: (request: URLSearchParams) => Record<string, string>
  /** The ID token's claims for a token request, given the authorization request that started it. */
  claims: (authorization: URLSearchParams) => Record<string, unknown>
  /** How the ID token is signed: by the published key (default), or by one the JWKS does not have. */
  signWith: 'published' | 'foreign'
  /** The token endpoint's status and body instead of tokens, when set. */
  tokenAnswer: { status: number; body: Record<string, unknown> } | undefined
  /** Discovery answers 503 while true. */
  down: boolean
  /** Signs claims as this provider would (for ID tokens handed out by hand). */
  sign(claims: Record<string, unknown>): Promise<string>
  close(): Promise<void>
}

export const FORGED_CLIENT = { client_id: 'portcullis', client_secret: 'forged-secret-0123456789abcdef' }

export async function startForgedIdp(options: { issRequired?: boolean } = {}): Promise<ForgedIdp> {
  const published = await generateKeyPair('ES256')
  const foreign = await generateKeyPair('ES256')
  const jwk: JWK = { ...await exportJWK(published.publicKey), kid: 'k1', alg: 'ES256', use: 'sig' }
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const byCode = new Map<string, URLSearchParams>()
  const sign = (claims: Record<string, unknown>, key: CryptoKey = published.privateKey) =>
    new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: 'k1', typ: 'JWT' }).sign(key)
  const idp: ForgedIdp = {
    issuer,
    authorizations: [],
    tokenRequests: [],
    callback: (request) => ({ code: `code-${idp.authorizations.length}`, state: request.get('state') ?? '', iss: issuer }),
    claims: (authorization) => {
      const now = Math.floor(Date.now() / 1000)
      return { iss: issuer, aud: FORGED_CLIENT.client_id, sub: 'user-1', iat: now, exp: now + 300, nonce: authorization.get('nonce'), email: 'user@example.com', email_verified: true }
    },
    signWith: 'published',
    tokenAnswer: undefined,
    down: false,
    sign: (claims) => sign(claims),
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    }),
  }
  const json = (res: http.ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body))
  }
  server.on('request', (req, res) => {
    const url = new URL(req.url ?? '/', issuer)
    if (url.pathname === '/.well-known/openid-configuration') {
      if (idp.down) return json(res, 503, { error: 'down' })
      return json(res, 200, {
        issuer, authorization_endpoint: `${issuer}/authorize`, token_endpoint: `${issuer}/token`, jwks_uri: `${issuer}/jwks`,
        end_session_endpoint: `${issuer}/logout`,
        response_types_supported: ['code'], subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['ES256'],
        code_challenge_methods_supported: ['S256'], token_endpoint_auth_methods_supported: ['client_secret_basic'],
        ...(options.issRequired !== false && { authorization_response_iss_parameter_supported: true }),
      })
    }
    if (url.pathname === '/jwks') return json(res, 200, { keys: [jwk] })
    if (url.pathname === '/authorize') {
      idp.authorizations.push(url.searchParams)
      const back = new URL(url.searchParams.get('redirect_uri')!)
      const params = idp.callback(url.searchParams)
      for (const [name, value] of Object.entries(params)) back.searchParams.set(name, value)
      if (params.code !== undefined) byCode.set(params.code, url.searchParams)
      res.writeHead(302, { location: back.href }).end()
      return undefined
    }
    if (url.pathname === '/token' && req.method === 'POST') {
      let body = ''
      req.on('data', (chunk: Buffer) => { body += chunk.toString() })
      req.on('end', () => {
        const form = new URLSearchParams(body)
        idp.tokenRequests.push(form)
        if (idp.tokenAnswer) return json(res, idp.tokenAnswer.status, idp.tokenAnswer.body)
        const authorization = byCode.get(form.get('code') ?? '')
        if (!authorization) return json(res, 400, { error: 'invalid_grant' })
        void sign(idp.claims(authorization), idp.signWith === 'foreign' ? foreign.privateKey : published.privateKey)
          .then((idToken) => json(res, 200, { access_token: 'upstream-access-token', token_type: 'Bearer', expires_in: 300, id_token: idToken }))
        return undefined
      })
      return undefined
    }
    res.writeHead(404).end()
    return undefined
  })
  return idp
}
