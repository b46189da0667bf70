/**
 * A token issuer on 127.0.0.1:0: signs with jose (ES256 and RS256 keys), serves its JWKS at /jwks and
 * discovery metadata, counts JWKS fetches, can rotate keys and can pretend to be down.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose'
import type { JwsAlgorithm } from '../../src/config/schema.js'

export interface SigningKey {
  kid: string
  alg: JwsAlgorithm
  privateKey: CryptoKey
  publicJwk: JWK
}

export interface SignOptions {
  alg?: 'ES256' | 'RS256'
  kid?: string
  /** Sign with this key instead of a published one. */
  key?: SigningKey
  typ?: string
  header?: Record<string, unknown>
  /** Seconds from now; default 300. */
  expiresIn?: number
}

export interface TestIssuer {
  issuer: string
  jwksUri: string
  audience: string
  /** How many times /jwks was requested. */
  jwksFetches: number
  keys: SigningKey[]
  sign(claims?: JWTPayload, options?: SignOptions): Promise<string>
  /** Publishes a new key of that algorithm (and keeps the old ones unless `replace`). */
  rotate(alg?: JwsAlgorithm, replace?: boolean): Promise<SigningKey>
  /** While down, /jwks answers 503. */
  setDown(down: boolean): void
  close(): Promise<void>
}

let counter = 0

export async function createSigningKey(alg: JwsAlgorithm, kid = `key-${alg}-${++counter}`): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
  return { kid, alg, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } }
}

export async function signWith(key: SigningKey, claims: JWTPayload, options: SignOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000)
  return new SignJWT({ iat: now, exp: now + (options.expiresIn ?? 300), ...claims })
    .setProtectedHeader({ alg: key.alg, kid: options.kid ?? key.kid, typ: options.typ ?? 'at+jwt', ...options.header })
    .sign(key.privateKey)
}

export async function startTestIssuer(options: { audience?: string; path?: string } = {}): Promise<TestIssuer> {
  const keys = [await createSigningKey('ES256'), await createSigningKey('RS256')]
  let down = false
  const server = http.createServer((req, res) => {
    if (req.url === '/jwks') {
      state.jwksFetches++
      if (down) { res.writeHead(503).end(); return }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ keys: state.keys.map((key) => key.publicJwk) }))
      return
    }
    if (req.url === `/.well-known/oauth-authorization-server${options.path ?? ''}` ||
        req.url === `${options.path ?? ''}/.well-known/openid-configuration`) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ issuer: state.issuer, jwks_uri: state.jwksUri }))
      return
    }
    res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  const origin = `http://127.0.0.1:${port}`
  const state: TestIssuer = {
    issuer: `${origin}${options.path ?? ''}`,
    jwksUri: `${origin}/jwks`,
    audience: options.audience ?? 'orders-api',
    jwksFetches: 0,
    keys,
    sign: (claims = {}, signOptions = {}) => {
      const key = signOptions.key ?? state.keys.find((k) => k.alg === (signOptions.alg ?? 'ES256'))!
      return signWith(key, { iss: state.issuer, aud: state.audience, sub: 'user-1', client_id: 'client-1', ...claims }, signOptions)
    },
    rotate: async (alg = 'ES256', replace = false) => {
      const key = await createSigningKey(alg)
      state.keys = replace ? [key, ...state.keys.filter((k) => k.alg !== alg)] : [key, ...state.keys]
      return key
    },
    setDown: (value) => { down = value },
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
  return state
}
