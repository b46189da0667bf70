/**
 * JWT access-token validation against a jose-signed issuer serving a JWKS: claims, algorithms, headers
 * an attacker controls, and what the client and the log are told. Every rejection asserts the status,
 * the exact challenge, the JSON body, the logged reason, that the token was not logged and that nothing
 * reached the upstream.
 */
import { createHmac } from 'node:crypto'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { exportSPKI, importJWK, SignJWT, type CryptoKey, type JWTPayload } from 'jose'
import { JWS_ALGORITHMS } from '../../src/config/schema.js'
import { startRecordingUpstream } from '../support/upstream.js'
import { bootHarness, resetHarness, shutdownHarness, startHarness, type Harness } from '../support/harness.js'
import { createSigningKey, signWith, startTestIssuer, type SigningKey, type TestIssuer } from '../support/issuer.js'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'

// One default gateway for the whole file: every test starts with no recorded request and no log line.
let shared: Harness
beforeAll(async () => { shared = await bootHarness() })
afterAll(() => shutdownHarness(shared))
beforeEach(() => resetHarness(shared))

const INVALID_TOKEN_CHALLENGE = 'Bearer realm="test", error="invalid_token", error_description="the access token is invalid or expired"'
const nowSeconds = () => Math.floor(Date.now() / 1000)

function call(harness: Harness, token: string): Promise<Response> {
  return fetch(`${harness.gateway.url}/orders/1`, { headers: { authorization: `Bearer ${token}` } })
}

function deniedReasons(gateway: RunningGateway): unknown[] {
  return gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
}

/** 401 invalid_token with the generic text; the precise reason is in the log, the token nowhere. */
async function expectInvalidToken(harness: Harness, token: string, reason: string): Promise<void> {
  const res = await call(harness, token)
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
  const body = await res.json()
  expect(body).toEqual({ error: 'invalid_token', error_description: 'the access token is invalid or expired' })
  expect(harness.upstream.requests).toHaveLength(0)
  expect(deniedReasons(harness.gateway)).toEqual([reason])
  const logs = harness.gateway.logs.join('')
  expect(logs).not.toContain(token)
  const signature = token.split('.')[2]
  if (signature) expect(logs).not.toContain(signature)
}

async function expectAccepted(harness: Harness, token: string): Promise<void> {
  const res = await call(harness, token)
  expect(res.status).toBe(200)
  expect(harness.upstream.requests).toHaveLength(1)
  expect(harness.upstream.requests[0]!.headers['x-auth-subject']).toBe('user-1')
  harness.upstream.requests.length = 0
}

const b64url = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

/** A compact JWS built by hand, so the header can carry what jose's signer refuses (crit, jwk, …). */
async function signRaw(key: SigningKey, header: Record<string, unknown>, payload: JWTPayload): Promise<string> {
  const input = `${b64url(header)}.${b64url(payload)}`
  const algorithm = key.alg === 'ES256' ? { name: 'ECDSA', hash: 'SHA-256' } : { name: 'RSASSA-PKCS1-v1_5' }
  const signature = await crypto.subtle.sign(algorithm, key.privateKey, new TextEncoder().encode(input))
  return `${input}.${Buffer.from(signature).toString('base64url')}`
}

function claimsFor(issuer: TestIssuer, extra: JWTPayload = {}): JWTPayload {
  const now = nowSeconds()
  return { iss: issuer.issuer, aud: issuer.audience, sub: 'user-1', client_id: 'client-1', iat: now, exp: now + 300, ...extra }
}

const es256 = (issuer: TestIssuer) => issuer.keys.find((key) => key.alg === 'ES256')!
const rs256 = (issuer: TestIssuer) => issuer.keys.find((key) => key.alg === 'RS256')!

describe('JWT time claims (exp, nbf, iat) with clock_skew', () => {
  it('accepts a valid ES256 and a valid RS256 token', async () => {
    await expectAccepted(shared, await shared.issuer.sign())
    await expectAccepted(shared, await shared.issuer.sign({}, { alg: 'RS256' }))
  })

  it('answers 401 invalid_token for an expired token', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ exp: nowSeconds() - 120 }), 'expired')
  })

  it('accepts a token expired by less than the default 30s clock_skew', async () => {
    await expectAccepted(shared, await shared.issuer.sign({ exp: nowSeconds() - 10 }))
  })

  it('uses the configured clock_skew', async (context) => {
    const harness = await startHarness(context, { issuerExtra: { clock_skew: '2m' } })
    await expectAccepted(harness, await harness.issuer.sign({ exp: nowSeconds() - 90 }))
    await expectInvalidToken(harness, await harness.issuer.sign({ exp: nowSeconds() - 180 }), 'expired')
  })

  it('answers 401 for a token whose nbf is in the future beyond the skew, accepts one within it', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ nbf: nowSeconds() + 120 }), 'not_yet_valid')
    shared.gateway.logs.length = 0
    await expectAccepted(shared, await shared.issuer.sign({ nbf: nowSeconds() + 10 }))
  })

  it('answers 401 for a token issued in the future beyond the skew, accepts one within it', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ iat: nowSeconds() + 120 }), 'issued_in_future')
    shared.gateway.logs.length = 0
    await expectAccepted(shared, await shared.issuer.sign({ iat: nowSeconds() + 10 }))
  })

  it('answers 401 for a token whose iat is not a number', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ iat: 'yesterday' as unknown as number }), 'bad_claim')
  })

  it('answers 401 for a token whose nbf is not a number', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ nbf: 'now' as unknown as number }), 'bad_claim')
  })

  it('answers 401 for a token without exp', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ exp: undefined }), 'missing_claim')
  })

  it('answers 401 for a token whose exp is not a number', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ exp: String(nowSeconds() + 300) as unknown as number }), 'bad_claim')
  })
})

describe('JWT issuer and audience', () => {
  it('answers 401 for a wrong aud', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ aud: 'billing-api' }), 'wrong_audience')
  })

  it('answers 401 for a token without aud', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ aud: undefined }), 'missing_claim')
  })

  it('accepts an aud array containing one configured audience', async () => {
    await expectAccepted(shared, await shared.issuer.sign({ aud: ['billing-api', shared.issuer.audience] }))
  })

  it('answers 401 for an aud array containing none of the configured audiences', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ aud: ['billing-api', 'orders'] }), 'wrong_audience')
  })

  it.for([
    ['an unknown issuer', 'https://evil.example/'],
    ['the issuer with a trailing slash', 'ISSUER/'],
    ['the issuer in upper case', 'UPPER'],
  ])('answers 401 for %s (iss is matched exactly)', async ([, iss]) => {
    const value = iss === 'ISSUER/' ? `${shared.issuer.issuer}/` : iss === 'UPPER' ? shared.issuer.issuer.toUpperCase() : iss!
    await expectInvalidToken(shared, await shared.issuer.sign({ iss: value }), 'unknown_issuer')
  })

  it('answers 401 for a token without iss or with a non-string iss', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({ iss: undefined }), 'unknown_issuer')
    shared.gateway.logs.length = 0
    await expectInvalidToken(shared, await shared.issuer.sign({ iss: 42 as unknown as string }), 'unknown_issuer')
  })

  it('answers 401 for a token signed by another issuer that claims to be ours', async (context) => {
    const other = await startTestIssuer()
    context.onTestFinished(() => other.close())
    await expectInvalidToken(shared, await signWith(es256(other), claimsFor(shared.issuer), { kid: es256(shared.issuer).kid }), 'bad_signature')
  })
})

describe('JWT signatures and algorithms', () => {
  it('answers 401 for a tampered payload (bad signature)', async () => {
    const token = await shared.issuer.sign({ scope: 'orders:read' })
    const [header, , signature] = token.split('.')
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as JWTPayload
    const forged = `${header}.${b64url({ ...payload, sub: 'admin', scope: 'orders:admin' })}.${signature}`
    await expectInvalidToken(shared, forged, 'bad_signature')
  })

  it('answers 401 for a tampered signature', async () => {
    const token = await shared.issuer.sign({}, { alg: 'RS256' })
    const [header, payload, signature] = token.split('.')
    const flipped = Buffer.from(signature!, 'base64url')
    flipped[0] = flipped[0]! ^ 1
    await expectInvalidToken(shared, `${header}.${payload}.${flipped.toString('base64url')}`, 'bad_signature')
  })

  it('accepts a jose-signed token of every algorithm the config allows, and refuses each with one bit of its signature flipped', async (context) => {
    const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
    const keys: SigningKey[] = []
    for (const alg of JWS_ALGORITHMS) keys.push(await issuer.rotate(alg))
    const gateway = await startGateway(testConfig({ upstream, issuer, issuerExtra: { algorithms: [...JWS_ALGORITHMS] } }))
    const harness = { upstream, issuer, gateway }
    context.onTestFinished(() => shutdownHarness(harness))
    for (const key of keys) {
      const token = await signWith(key, claimsFor(issuer))
      await expectAccepted(harness, token)
      const [header, payload, signature] = token.split('.')
      const flipped = Buffer.from(signature!, 'base64url')
      flipped[flipped.length - 1] = flipped[flipped.length - 1]! ^ 1
      gateway.logs.length = 0
      await expectInvalidToken(harness, `${header}.${payload}.${flipped.toString('base64url')}`, 'bad_signature')
      gateway.logs.length = 0
    }
    expect(keys.map((key) => key.alg)).toEqual([...JWS_ALGORITHMS])
  })

  it('answers 401 malformed for alg none with an empty signature (issue 15: a JWT all the same)', async () => {
    const token = `${b64url({ alg: 'none', typ: 'at+jwt' })}.${b64url(claimsFor(shared.issuer))}.`
    await expectInvalidToken(shared, token, 'malformed')
  })

  it('answers 401 for alg none with a filler signature', async () => {
    const token = `${b64url({ alg: 'none', typ: 'at+jwt', kid: es256(shared.issuer).kid })}.${b64url(claimsFor(shared.issuer))}.AAAA`
    await expectInvalidToken(shared, token, 'algorithm_not_allowed')
  })

  it.for(['none', 'None', 'NONE'])('answers 401 for alg %s (any case)', async (alg) => {
    const token = `${b64url({ alg, typ: 'at+jwt' })}.${b64url(claimsFor(shared.issuer))}.AAAA`
    await expectInvalidToken(shared, token, 'algorithm_not_allowed')
  })

  it('answers 401 for HS256 signed with the issuer\'s RSA public key (PEM) as the HMAC secret', async () => {
    const key = rs256(shared.issuer)
    const pem = await exportSPKI(await importJWK(key.publicJwk, 'RS256', { extractable: true }) as CryptoKey)
    const token = await new SignJWT(claimsFor(shared.issuer))
      .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: key.kid })
      .sign(new TextEncoder().encode(pem))
    await expectInvalidToken(shared, token, 'algorithm_not_allowed')
  })

  it('answers 401 for HS256 keyed with the published JWK itself', async () => {
    const key = es256(shared.issuer)
    const input = `${b64url({ alg: 'HS256', typ: 'at+jwt', kid: key.kid })}.${b64url(claimsFor(shared.issuer))}`
    const mac = createHmac('sha256', JSON.stringify(key.publicJwk)).update(input).digest('base64url')
    await expectInvalidToken(shared, `${input}.${mac}`, 'algorithm_not_allowed')
  })

  it('answers 401 for an RS256 token when the issuer allows only ES256', async (context) => {
    const harness = await startHarness(context, { issuerExtra: { algorithms: ['ES256'] } })
    await expectInvalidToken(harness, await harness.issuer.sign({}, { alg: 'RS256' }), 'algorithm_not_allowed')
    harness.gateway.logs.length = 0
    await expectAccepted(harness, await harness.issuer.sign({}, { alg: 'ES256' }))
  })

  it('answers 401 for an ES256-signed token that claims RS256 in its header', async () => {
    const token = await signRaw(es256(shared.issuer), { alg: 'RS256', typ: 'at+jwt', kid: es256(shared.issuer).kid }, claimsFor(shared.issuer))
    await expectInvalidToken(shared, token, 'unknown_kid')
  })

  it('answers 401 for a token whose kid is not in the JWKS', async () => {
    await expectInvalidToken(shared, await shared.issuer.sign({}, { kid: 'no-such-key' }), 'unknown_kid')
  })

  it('answers 401 for a token signed by an unpublished key that reuses a published kid', async () => {
    const impostor = await createSigningKey('ES256', es256(shared.issuer).kid)
    await expectInvalidToken(shared, await signWith(impostor, claimsFor(shared.issuer)), 'bad_signature')
  })

  it('accepts a token without kid when exactly one published key fits its alg', async () => {
    const token = await signRaw(es256(shared.issuer), { alg: 'ES256', typ: 'at+jwt' }, claimsFor(shared.issuer))
    await expectAccepted(shared, token)
  })

  it('accepts a token without kid signed by any of several published keys of its type (issuer mid-rotation)', async (context) => {
    const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
    const older = es256(issuer)
    const newer = await issuer.rotate('ES256')
    const gateway = await startGateway(testConfig({ upstream, issuer }))
    const harness = { upstream, issuer, gateway }
    context.onTestFinished(() => shutdownHarness(harness))
    const unkeyed = { alg: 'ES256', typ: 'at+jwt' }
    await expectAccepted(harness, await signRaw(newer, unkeyed, claimsFor(issuer)))
    await expectAccepted(harness, await signRaw(older, unkeyed, claimsFor(issuer)))
    await expectInvalidToken(harness, await signRaw(await createSigningKey('ES256'), unkeyed, claimsFor(issuer)), 'bad_signature')
    gateway.logs.length = 0
    // With the right key, a claim failure is reported as such.
    await expectInvalidToken(harness, await signRaw(older, unkeyed, claimsFor(issuer, { exp: nowSeconds() - 3600 })), 'expired')
  })
})

describe('one signed token, one spelling', () => {
  const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

  it('refuses, as malformed, a respelling of a valid signature that decodes to the same bytes (so a revoked or cached hash cannot be sidestepped)', async (context) => {
    const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
    const es384 = await issuer.rotate('ES384')
    const gateway = await startGateway(testConfig({ upstream, issuer, issuerExtra: { algorithms: ['ES256', 'ES384'] } }))
    const harness = { upstream, issuer, gateway }
    context.onTestFinished(() => shutdownHarness(harness))

    // ES256: 64 bytes end in a 2-character group whose last character carries 4 unused bits.
    const token = await signWith(es256(issuer), claimsFor(issuer))
    await expectAccepted(harness, token)
    const [header, payload, signature] = token.split('.') as [string, string, string]
    const last = ALPHABET.indexOf(signature.at(-1)!)
    const trailingBits = `${signature.slice(0, -1)}${ALPHABET[last ^ 1]}`
    expect(Buffer.from(trailingBits, 'base64url')).toEqual(Buffer.from(signature, 'base64url'))
    await expectInvalidToken(harness, `${header}.${payload}.${trailingBits}`, 'malformed')
    gateway.logs.length = 0

    // ES384: 96 bytes are exactly 128 characters; one more is a dangling character a lenient decoder drops.
    const long = await signWith(es384, claimsFor(issuer))
    await expectAccepted(harness, long)
    const dangling = `${long}A`
    expect(Buffer.from(dangling.split('.')[2]!, 'base64url')).toEqual(Buffer.from(long.split('.')[2]!, 'base64url'))
    await expectInvalidToken(harness, dangling, 'malformed')
  })
})

describe('JOSE header parameters', () => {
  it('answers 401 for a token with a crit header, even one naming a present parameter', async () => {
    const key = es256(shared.issuer)
    await expectInvalidToken(shared,
      await signRaw(key, { alg: 'ES256', typ: 'at+jwt', kid: key.kid, crit: ['urn:example:ext'], 'urn:example:ext': true }, claimsFor(shared.issuer)),
      'crit_header')
    shared.gateway.logs.length = 0
    await expectInvalidToken(shared,
      await signRaw(key, { alg: 'ES256', typ: 'at+jwt', kid: key.kid, crit: ['exp'] }, claimsFor(shared.issuer)), 'crit_header')
  })

  it('ignores jku, x5u and jwk headers pointing at an attacker key, and never fetches them', async (context) => {
    const attacker = await startTestIssuer()
    context.onTestFinished(() => attacker.close())
    const evil = es256(attacker)
    const header = {
      alg: 'ES256', typ: 'at+jwt',
      jku: attacker.jwksUri, x5u: `${attacker.jwksUri}.pem`, jwk: evil.publicJwk,
    }
    // Attacker kid: unknown to our JWKS.
    await expectInvalidToken(shared, await signRaw(evil, { ...header, kid: evil.kid }, claimsFor(shared.issuer)), 'unknown_kid')
    shared.gateway.logs.length = 0
    // Our kid: our key does not verify the attacker's signature.
    await expectInvalidToken(shared, await signRaw(evil, { ...header, kid: es256(shared.issuer).kid }, claimsFor(shared.issuer)), 'bad_signature')
    shared.gateway.logs.length = 0
    // No kid: only our published ES256 key is a candidate.
    await expectInvalidToken(shared, await signRaw(evil, header, claimsFor(shared.issuer)), 'bad_signature')
    expect(attacker.jwksFetches).toBe(0)
  })

  it('refuses an ID token (typ JWT with nonce and at_hash) when require_typ is at+jwt', async (context) => {
    const harness = await startHarness(context, { issuerExtra: { require_typ: 'at+jwt' } })
    const idToken = await harness.issuer.sign({ nonce: 'n-0S6_WzA2Mj', at_hash: '77QmUPtjPfzWtF2AnpK9RQ', azp: 'web-app' }, { typ: 'JWT' })
    await expectInvalidToken(harness, idToken, 'wrong_typ')
    harness.gateway.logs.length = 0
    const untyped = await signRaw(es256(harness.issuer), { alg: 'ES256', kid: es256(harness.issuer).kid }, claimsFor(harness.issuer))
    await expectInvalidToken(harness, untyped, 'wrong_typ')
    harness.gateway.logs.length = 0
    await expectAccepted(harness, await harness.issuer.sign({}, { typ: 'at+jwt' }))
    await expectAccepted(harness, await harness.issuer.sign({}, { typ: 'application/at+jwt' }))
  })
})

describe('tokens that are not JWTs', () => {
  it('answers 401 invalid_token for an opaque token', async () => {
    await expectInvalidToken(shared, 'mF_9.B5f-4.1JqM', 'malformed')
    shared.gateway.logs.length = 0
    await expectInvalidToken(shared, 'opaque-token-2YotnFZFEjr1zCsicMWpAA', 'no_introspecting_issuer')
  })

  it.for([
    ['two segments', 'eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0', 'no_introspecting_issuer'],
    ['four segments', 'eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0.AAAA.AAAA', 'no_introspecting_issuer'],
    // Issue 15: three segments make a JWT, whatever they hold; it is refused, never introspected.
    ['an empty payload', 'eyJhbGciOiJFUzI1NiJ9..AAAA', 'malformed'],
    ['three empty segments', '..', 'malformed'],
    ['a header that is not JSON', `${b64url('not json')}.${b64url({ iss: 'x' })}.AAAA`, 'malformed'],
    ['a payload that is not JSON', `${b64url({ alg: 'ES256' })}.${b64url('not json')}.AAAA`, 'malformed'],
    ['a payload that is a JSON array', `${b64url({ alg: 'ES256' })}.${b64url('[1,2]')}.AAAA`, 'malformed'],
    ['a payload that is not UTF-8', `${b64url({ alg: 'ES256' })}.${Buffer.concat([Buffer.from('{"iss":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]).toString('base64url')}.AAAA`, 'malformed'],
    ['a header that is not UTF-8', `${Buffer.concat([Buffer.from('{"alg":"ES256","kid":"'), Buffer.from([0xc3]), Buffer.from('"}')]).toString('base64url')}.${b64url({ iss: 'x' })}.AAAA`, 'malformed'],
    ['a JWE-shaped token (five segments)', 'eyJhbGciOiJSU0EtT0FFUCJ9.AAAA.AAAA.AAAA.AAAA', 'no_introspecting_issuer'],
  ])('answers 401 invalid_token for a token with %s', async ([, token, reason]) => {
    await expectInvalidToken(shared, token!, reason!)
  })
})

describe('what the client and the log are told', () => {
  it('gives every invalid token the same generic description, the reason only in the log', async () => {
    const tokens = await Promise.all([
      shared.issuer.sign({ exp: nowSeconds() - 600 }),
      shared.issuer.sign({ aud: 'other' }),
      shared.issuer.sign({}, { kid: 'unknown' }),
    ])
    const bodies = new Set<string>()
    const challenges = new Set<string | null>()
    for (const token of tokens) {
      const res = await call(shared, token)
      challenges.add(res.headers.get('www-authenticate'))
      bodies.add(await res.text())
    }
    expect([...bodies]).toEqual([JSON.stringify({ error: 'invalid_token', error_description: 'the access token is invalid or expired' })])
    expect([...challenges]).toEqual([INVALID_TOKEN_CHALLENGE])
    expect(deniedReasons(shared.gateway)).toEqual(['expired', 'wrong_audience', 'unknown_kid'])
    const logs = shared.gateway.logs.join('')
    for (const token of tokens) expect(logs).not.toContain(token.split('.')[2]!)
  })

  it('never logs an accepted token', async () => {
    const token = await shared.issuer.sign({ scope: 'orders:read' })
    await expectAccepted(shared, token)
    const logs = shared.gateway.logs.join('')
    expect(logs).not.toContain(token)
    expect(logs).not.toContain(token.split('.')[2]!)
  })
})
