import { silentAudit } from '../audit/audit.js'
import { describe, expect, it } from 'vitest'
import type { FastifyRequest } from 'fastify'
import type { ClientConfig } from '../config/schema.js'
import { hashSecret } from '../crypto/secret-hash.js'
import { GatewayError, InvalidClient, InvalidRequest, TooManyAttempts } from '../errors/oauth-errors.js'
import { authenticateClient, decodeBasicCredentials } from './client-auth.js'
import { ClientRegistry } from './clients.js'
import type { AuthServerContext } from './context.js'
import { resolveSettings } from './settings.js'
import { createThrottle } from './throttle.js'

/** RFC 6749 App. B form encoding, as strict clients do it (oauth4webapi's formUrlEncode encodes even -_.!~*'()). */
function formEncode(value: string): string {
  return encodeURIComponent(value).replace(/%20/g, '+').replace(/[!'()*~._-]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

function basic(clientId: string, secret: string): string {
  return `Basic ${Buffer.from(`${formEncode(clientId)}:${formEncode(secret)}`).toString('base64')}`
}

function basicRaw(decoded: string): string {
  return `Basic ${Buffer.from(decoded).toString('base64')}`
}

function refusal(run: () => unknown): GatewayError {
  try {
    run()
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError)
    return error as GatewayError
  }
  throw new Error('expected a refusal')
}

async function rejection(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError)
    return error as GatewayError
  }
  throw new Error('expected a rejection')
}

describe('decodeBasicCredentials (RFC 6749 §2.3.1, App. B)', () => {
  it('the header of RFC 6749 §4.1.3 decodes to s6BhdRkqt3 / gX1fBat3bV', () => {
    expect(decodeBasicCredentials('Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW')).toEqual({ clientId: 's6BhdRkqt3', clientSecret: 'gX1fBat3bV' })
  })

  it('the header of RFC 6749 §2.3.1 decodes to s6BhdRkqt3 / 7Fjfp0ZBr1KtDRbnfVdmIw', () => {
    expect(decodeBasicCredentials('Basic czZCaGRSa3F0Mzo3RmpmcDBaQnIxS3REUmJuZlZkbUl3'))
      .toEqual({ clientId: 's6BhdRkqt3', clientSecret: '7Fjfp0ZBr1KtDRbnfVdmIw' })
  })

  it('RFC 6749 App. B characters " %&+" round-trip in both parts', () => {
    expect(basic(' %&+', ' %&+')).toBe('Basic KyUyNSUyNiUyQjorJTI1JTI2JTJC')
    expect(decodeBasicCredentials('Basic KyUyNSUyNiUyQjorJTI1JTI2JTJC')).toEqual({ clientId: ' %&+', clientSecret: ' %&+' })
  })

  it('a ":" inside the encoded client_id does not split it', () => {
    const header = 'Basic YW4lM0FpZGVudGlmaWVyOnNvbWUrc2VjdXJlKyUyNitub24lMkRzdGFuZGFyZCtzZWNyZXQ='
    expect(basic('an:identifier', 'some secure & non-standard secret')).toBe(header)
    expect(decodeBasicCredentials(header)).toEqual({ clientId: 'an:identifier', clientSecret: 'some secure & non-standard secret' })
  })

  it('credentials with /, +, = and : (the AppAuth-Android example) decode exactly', () => {
    const header = 'Basic MVBwRyUyRlErMTp6JTJGdFo5VndGWnFBcG1JUSUyQlpIMUk1cExrJTJGdUI0dWQlM0FYMiUyRjhiTCUyQndmRlR0MXJGdyUzRA=='
    expect(basic('1PpG/Q 1', 'z/tZ9VwFZqApmIQ+ZH1I5pLk/uB4ud:X2/8bL+wfFTt1rFw=')).toBe(header)
    expect(decodeBasicCredentials(header)).toEqual({ clientId: '1PpG/Q 1', clientSecret: 'z/tZ9VwFZqApmIQ+ZH1I5pLk/uB4ud:X2/8bL+wfFTt1rFw=' })
  })

  it('an improperly encoded %-sequence → 400 invalid_request', () => {
    const error = refusal(() => decodeBasicCredentials('Basic ' + Buffer.from('foo with %:foo with $').toString('base64')))
    expect(error).toBeInstanceOf(InvalidRequest)
    expect(error.status).toBe(400)
    expect(error.code).toBe('invalid_request')
  })

  it('splits at the first ":" of the decoded value; later ones belong to the secret', () => {
    expect(decodeBasicCredentials(basicRaw('client:se:cr:et'))).toEqual({ clientId: 'client', clientSecret: 'se:cr:et' })
  })

  it('a raw "+" decodes to a space, %2B to a plus, and %XX octets as UTF-8', () => {
    expect(decodeBasicCredentials(basicRaw('id:Abc123++%2B%C2%A3%E2%82%AC'))).toEqual({ clientId: 'id', clientSecret: 'Abc123  +£€' })
  })

  it('an empty secret is an empty string, not a missing one', () => {
    expect(decodeBasicCredentials(basicRaw('id:'))).toEqual({ clientId: 'id', clientSecret: '' })
  })

  it('the scheme name is matched case-insensitively (RFC 7235 §2.1)', () => {
    for (const scheme of ['basic', 'BASIC', 'bAsIc']) {
      expect(decodeBasicCredentials(`${scheme} czZCaGRSa3F0MzpnWDFmQmF0M2JW`).clientId).toBe('s6BhdRkqt3')
    }
  })

  it('unpadded base64 is accepted', () => {
    expect(decodeBasicCredentials('Basic ' + Buffer.from('a:bc').toString('base64').replace(/=+$/, ''))).toEqual({ clientId: 'a', clientSecret: 'bc' })
  })

  it.each([
    ['malformed base64', 'Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW!'],
    ['base64 of impossible length', 'Basic czZCa'],
    ['padding in the middle', 'Basic cz=CaGRSa3F0MzpnWDFmQmF0M2JW'],
    ['no ":" in the decoded value', basicRaw('s6BhdRkqt3')],
    ['a bad %-sequence in the client_id', basicRaw('id%G1:secret')],
    ['a truncated %-sequence in the secret', basicRaw('id:secret%4')],
    ['decoded octets that are not UTF-8', 'Basic ' + Buffer.from([0x69, 0x64, 0x3a, 0xff, 0xfe]).toString('base64')],
    ['no credentials after the scheme', 'Basic'],
    ['another scheme', 'Bearer czZCaGRSa3F0MzpnWDFmQmF0M2JW'],
    ['two tokens', 'Basic czZC aGRS'],
  ])('%s → 400 invalid_request', (_name, header) => {
    const error = refusal(() => decodeBasicCredentials(header))
    expect(error).toBeInstanceOf(InvalidRequest)
    expect(error.code).toBe('invalid_request')
  })
})

const SECRET = 'a-long-enough-client-secret'

async function contextWith(clients: ClientConfig[], throttling = { failures_per_client: 3, failures_per_ip: 5, window: '1m' }): Promise<AuthServerContext> {
  const settings = resolveSettings({ enabled: true, issuer: 'https://as.example', clients, throttling })
  // Only the parts client authentication reads; each of them is the real thing.
  return { settings, clients: new ClientRegistry(clients), throttle: createThrottle(settings), audit: silentAudit } as Partial<AuthServerContext> as AuthServerContext
}

const confidentialBasic: ClientConfig = { client_id: 'conf-basic', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic', grant_types: ['client_credentials'], scopes: [] }
const confidentialPost: ClientConfig = { client_id: 'conf-post', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_post', grant_types: ['client_credentials'], scopes: [] }
const publicClient: ClientConfig = { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['refresh_token'], scopes: [] }
const oddClient: ClientConfig = { client_id: 'an:identifier', client_secret: 'some secure & non-standard secret', grant_types: ['client_credentials'], scopes: [] }

function request(authorization?: string, ip = '192.0.2.1'): FastifyRequest {
  return { headers: authorization === undefined ? {} : { authorization }, ip } as FastifyRequest
}

function form(fields: Record<string, string> = {}): Map<string, string> {
  return new Map(Object.entries(fields))
}

describe('authenticateClient', async () => {
  const clients = [confidentialBasic, confidentialPost, publicClient, oddClient,
    { client_id: 'hashed', client_secret_hash: await hashSecret(SECRET), grant_types: ['client_credentials'], scopes: [] } satisfies ClientConfig]

  it('client_secret_basic with form-encoded credentials (a ":" in the client_id) authenticates', async () => {
    const ctx = await contextWith(clients)
    const client = await authenticateClient(request(basic('an:identifier', 'some secure & non-standard secret')), form(), ctx)
    expect(client.clientId).toBe('an:identifier')
  })

  it('client_secret_post with client_id and client_secret in the body authenticates', async () => {
    const ctx = await contextWith(clients)
    const client = await authenticateClient(request(), form({ client_id: 'conf-post', client_secret: SECRET }), ctx)
    expect(client.clientId).toBe('conf-post')
  })

  it('a client registered for basic may use post, and one registered for post may use basic', async () => {
    const ctx = await contextWith(clients)
    expect((await authenticateClient(request(), form({ client_id: 'conf-basic', client_secret: SECRET }), ctx)).clientId).toBe('conf-basic')
    expect((await authenticateClient(request(basic('conf-post', SECRET)), form(), ctx)).clientId).toBe('conf-post')
  })

  it('two authentication mechanisms in one request → 400 invalid_request (RFC 6749 §2.3)', async () => {
    const ctx = await contextWith(clients)
    const error = await rejection(authenticateClient(request(basic('conf-basic', SECRET)), form({ client_id: 'conf-basic', client_secret: SECRET }), ctx))
    expect(error).toBeInstanceOf(InvalidRequest)
    expect(error.status).toBe(400)
  })

  it('a body client_id that differs from the Basic client_id → 400 invalid_request', async () => {
    const ctx = await contextWith(clients)
    const error = await rejection(authenticateClient(request(basic('conf-basic', SECRET)), form({ client_id: 'conf-post' }), ctx))
    expect(error).toBeInstanceOf(InvalidRequest)
  })

  it('a body client_id equal to the Basic client_id is allowed', async () => {
    const ctx = await contextWith(clients)
    expect((await authenticateClient(request(basic('conf-basic', SECRET)), form({ client_id: 'conf-basic' }), ctx)).clientId).toBe('conf-basic')
  })

  it('an unknown client → 401 invalid_client, flagged when the header was used', async () => {
    const ctx = await contextWith(clients)
    const viaHeader = await rejection(authenticateClient(request(basic('nobody', SECRET)), form(), ctx))
    expect(viaHeader).toBeInstanceOf(InvalidClient)
    expect(viaHeader.status).toBe(401)
    expect((viaHeader as InvalidClient).usedAuthorizationHeader).toBe(true)
    const viaBody = await rejection(authenticateClient(request(), form({ client_id: 'nobody', client_secret: SECRET }), ctx))
    expect((viaBody as InvalidClient).usedAuthorizationHeader).toBe(false)
  })

  it('a wrong secret → 401 invalid_client, plain and hashed alike', async () => {
    const ctx = await contextWith(clients)
    for (const clientId of ['conf-basic', 'hashed']) {
      const error = await rejection(authenticateClient(request(basic(clientId, SECRET + 'x')), form(), ctx))
      expect(error).toBeInstanceOf(InvalidClient)
    }
    expect((await authenticateClient(request(basic('hashed', SECRET)), form(), ctx)).clientId).toBe('hashed')
  })

  it('a confidential client with no credentials → 401 invalid_client', async () => {
    const ctx = await contextWith(clients)
    const error = await rejection(authenticateClient(request(), form({ client_id: 'conf-basic' }), ctx))
    expect(error).toBeInstanceOf(InvalidClient)
    expect((error as InvalidClient).usedAuthorizationHeader).toBe(false)
  })

  it('no client identification at all → 401 invalid_client', async () => {
    const ctx = await contextWith(clients)
    expect(await rejection(authenticateClient(request(), form({ grant_type: 'client_credentials' }), ctx))).toBeInstanceOf(InvalidClient)
  })

  it('a none client that sends a secret, in the body or by Basic → 401 invalid_client', async () => {
    const ctx = await contextWith(clients)
    expect(await rejection(authenticateClient(request(), form({ client_id: 'spa', client_secret: SECRET }), ctx))).toBeInstanceOf(InvalidClient)
    const viaHeader = await rejection(authenticateClient(request(basic('spa', '')), form(), ctx))
    expect(viaHeader).toBeInstanceOf(InvalidClient)
    expect((viaHeader as InvalidClient).usedAuthorizationHeader).toBe(true)
  })

  it('a public client identifies itself with client_id only', async () => {
    const ctx = await contextWith(clients)
    const client = await authenticateClient(request(), form({ client_id: 'spa' }), ctx)
    expect(client.clientId).toBe('spa')
    expect(client.confidential).toBe(false)
  })

  it('a client assertion is an unsupported mechanism → 401 invalid_client; with a secret as well → 400 invalid_request', async () => {
    const ctx = await contextWith(clients)
    const assertion = { client_id: 'conf-basic', client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer', client_assertion: 'x.y.z' }
    expect(await rejection(authenticateClient(request(), form(assertion), ctx))).toBeInstanceOf(InvalidClient)
    expect(await rejection(authenticateClient(request(), form({ ...assertion, client_secret: SECRET }), ctx))).toBeInstanceOf(InvalidRequest)
  })

  it('brute force: after N failures for a client_id, even the right secret gets 429 with a Retry-After', async () => {
    const ctx = await contextWith(clients)
    for (let attempt = 0; attempt < 3; attempt++) {
      expect(await rejection(authenticateClient(request(basic('conf-basic', 'wrong'), `192.0.2.${attempt + 10}`), form(), ctx))).toBeInstanceOf(InvalidClient)
    }
    const error = await rejection(authenticateClient(request(basic('conf-basic', SECRET), '192.0.2.99'), form(), ctx))
    expect(error).toBeInstanceOf(TooManyAttempts)
    expect(error.status).toBe(429)
    expect(error.code).toBe('temporarily_unavailable')
    expect((error as TooManyAttempts).retryAfterSeconds).toBeGreaterThan(0)
    expect((error as TooManyAttempts).retryAfterSeconds).toBeLessThanOrEqual(60)
    // Another client is not affected.
    expect((await authenticateClient(request(basic('conf-post', SECRET), '192.0.2.99'), form(), ctx)).clientId).toBe('conf-post')
  })

  it('brute force: after N failures from one address, every client authenticating from it gets 429', async () => {
    const ctx = await contextWith(clients, { failures_per_client: 100, failures_per_ip: 4, window: '1m' })
    const ip = '198.51.100.7'
    // Malformed headers, unknown clients, public clients with secrets and missing secrets all count against the address.
    expect(await rejection(authenticateClient(request('Basic !!!', ip), form(), ctx))).toBeInstanceOf(InvalidRequest)
    expect(await rejection(authenticateClient(request(basic('nobody', 'x'), ip), form(), ctx))).toBeInstanceOf(InvalidClient)
    expect(await rejection(authenticateClient(request(undefined, ip), form({ client_id: 'spa', client_secret: 'x' }), ctx))).toBeInstanceOf(InvalidClient)
    expect(await rejection(authenticateClient(request(undefined, ip), form({ client_id: 'conf-basic' }), ctx))).toBeInstanceOf(InvalidClient)
    const error = await rejection(authenticateClient(request(basic('conf-post', SECRET), ip), form(), ctx))
    expect(error).toBeInstanceOf(TooManyAttempts)
    expect(await rejection(authenticateClient(request(undefined, ip), form({ client_id: 'spa' }), ctx))).toBeInstanceOf(TooManyAttempts)
    // Another address is not affected.
    expect((await authenticateClient(request(basic('conf-post', SECRET), '198.51.100.8'), form(), ctx)).clientId).toBe('conf-post')
  })

  it('a throttled client is refused before its secret is verified', async () => {
    const settings = resolveSettings({ enabled: true, issuer: 'https://as.example', clients: [confidentialBasic], throttling: { failures_per_client: 1 } })
    const registry = new ClientRegistry([confidentialBasic])
    let verifications = 0
    const counting = new Proxy(registry, {
      get: (target, name) => (name === 'lookup'
        ? async (id: string) => {
          const client = await target.lookup(id)
          return client && { ...client, verifySecret: (secret: string) => { verifications++; return client.verifySecret(secret) } }
        }
        : Reflect.get(target, name)),
    })
    const ctx = { settings, clients: counting, throttle: createThrottle(settings), audit: silentAudit } as Partial<AuthServerContext> as AuthServerContext
    await rejection(authenticateClient(request(basic('conf-basic', 'wrong')), form(), ctx))
    expect(verifications).toBe(1)
    expect(await rejection(authenticateClient(request(basic('conf-basic', SECRET)), form(), ctx))).toBeInstanceOf(TooManyAttempts)
    expect(verifications).toBe(1)
  })

  it('parallel guessing: of 20 wrong hashed secrets sent at once, failures_per_client are verified and the rest refused; then the right one is refused too', async () => {
    const hashed: ClientConfig = { client_id: 'hashed', client_secret_hash: await hashSecret(SECRET), grant_types: ['client_credentials'], scopes: [] }
    const ctx = await contextWith([hashed], { failures_per_client: 3, failures_per_ip: 1000, window: '1m' })
    const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => rejection(authenticateClient(request(basic('hashed', `wrong-${i}`)), form(), ctx))))
    expect(outcomes.filter((error) => error instanceof InvalidClient)).toHaveLength(3)
    expect(outcomes.filter((error) => error instanceof TooManyAttempts)).toHaveLength(17)
    expect(await rejection(authenticateClient(request(basic('hashed', SECRET)), form(), ctx))).toBeInstanceOf(TooManyAttempts)
  })
})
