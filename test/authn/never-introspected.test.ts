/**
 * Issue 15, items 5 and 6: tokens that never leave the process. A token with one of the embedded
 * authorization server's prefixes (`pat_`, `prt_`, `pdc_`) is checked by the embedded server or refused,
 * and any three-segment token is a JWT: refused as malformed when it is not a signed compact JWS. Neither
 * is ever POSTed to a third-party introspection endpoint, whose server here answers `active: true` to
 * everything, so a token that reached it would be let through.
 */
import { randomBytes } from 'node:crypto'
import { describe, expect, it, type TestContext } from 'vitest'
import { passwordGrant, passwordSetup } from '../support/authserver.js'
import { startAuthServerGateway, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { deniedReasons, INVALID_TOKEN_CHALLENGE } from '../support/harness.js'
import { startIntrospectionServer, type TestIntrospectionServer } from '../support/introspection.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'

const ISSUER = 'https://idp.example.test/'
const AUDIENCE = 'orders-api'

interface Setup {
  gateway: RunningGateway
  upstream: RecordingUpstream
  idp: TestIntrospectionServer
}

/** A third-party issuer with introspection, no key source and no `token_prefix`: it would take any opaque token. */
function introspectingIssuer(idp: TestIntrospectionServer): Record<string, unknown> {
  return {
    issuer: ISSUER,
    audience: [AUDIENCE],
    introspection: { endpoint: idp.endpoint, client_id: idp.clientId, client_secret: idp.clientSecret },
  }
}

/** An introspection server that answers every token `active: true`. */
async function startAcceptingIdp(): Promise<TestIntrospectionServer> {
  const idp = await startIntrospectionServer()
  const now = Math.floor(Date.now() / 1000)
  idp.fallback = { json: { active: true, iss: ISSUER, aud: AUDIENCE, sub: 'someone', scope: 'orders:read', exp: now + 3600 } }
  return idp
}

async function setup(context: TestContext, embedded: boolean): Promise<Setup> {
  const [upstream, idp] = await Promise.all([startRecordingUpstream(), startAcceptingIdp()])
  const routes = [{ id: 'orders', path: '/orders/**', upstream: 'main', auth: 'required' }]
  const gateway = embedded
    ? await startAuthServerGateway(passwordSetup(), {
      upstreams: { main: { url: upstream.url } }, routes, issuers: [introspectingIssuer(idp)], server: { realm: 'test' },
    })
    : await startGateway({ ...testConfig({ upstream, routes }), issuers: [introspectingIssuer(idp)] })
  context.onTestFinished(async () => {
    await gateway.close()
    await Promise.all([upstream.close(), idp.close()])
  })
  return { gateway, upstream, idp }
}

/** 401 invalid_token, `reason` logged, and neither the upstream nor the introspection endpoint reached. */
async function expectRefusedLocally(s: Setup, token: string, reason: string): Promise<void> {
  const res = await fetch(`${s.gateway.url}/orders/1`, { headers: { authorization: `Bearer ${token}` } })
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
  expect(await res.json()).toEqual({ error: 'invalid_token', error_description: 'the access token is invalid or expired' })
  expect(deniedReasons(s.gateway).at(-1)).toBe(reason)
  expect(s.upstream.requests).toHaveLength(0)
  expect(s.idp.calls).toHaveLength(0)
  expect(s.gateway.logs.join('')).not.toContain(token)
}

/** The `reason` labels of portcullis_token_validations_total{result="invalid"} counted so far. */
async function invalidReasons(gateway: RunningGateway): Promise<Set<string>> {
  const text = await gateway.app.metrics.registry.metrics()
  const reasons = new Set<string>()
  for (const line of text.split('\n')) {
    if (!line.startsWith('portcullis_token_validations_total{') || !line.includes('result="invalid"') || line.endsWith(' 0')) continue
    reasons.add(/reason="([^"]*)"/.exec(line)![1]!)
  }
  return reasons
}

const random = () => randomBytes(32).toString('base64url')
const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

describe('issue 15 item 5: a token with an embedded server prefix is never introspected at a third party', () => {
  it('answers 401 invalid_token for a real refresh token presented as a Bearer', async (context) => {
    const s = await setup(context, true)
    const grant = await passwordGrant(s.gateway, 'orders:read')
    expect(grant.status).toBe(200)
    const refreshToken = grant.body.refresh_token as string
    expect(refreshToken.startsWith('prt_')).toBe(true)
    await expectRefusedLocally(s, refreshToken, 'not_an_access_token')
    expect(await invalidReasons(s.gateway)).toEqual(new Set(['inactive']))
  })

  it.for(['prt_', 'pdc_', 'pat_'])('answers 401 for any %s token, with the embedded server enabled', async (prefix, context) => {
    const s = await setup(context, true)
    await expectRefusedLocally(s, prefix + random(), prefix === 'pat_' ? 'inactive' : 'not_an_access_token')
  })

  it.for(['prt_', 'pdc_', 'pat_'])('answers 401 for any %s token, with no embedded server in this process', async (prefix, context) => {
    const s = await setup(context, false)
    await expectRefusedLocally(s, prefix + random(), 'embedded_token_prefix')
    expect(await invalidReasons(s.gateway)).toEqual(new Set(['unknown_issuer']))
  })
})

describe('issue 15 item 6: any three-segment token is a JWT, never introspected', () => {
  const unsignedToTheIdp = `${b64url({ alg: 'none' })}.${b64url({ iss: ISSUER, aud: AUDIENCE, sub: 'x', exp: 4102444800 })}`
  const malformed = [
    ['alg none, empty signature', 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.'],
    ['alg none naming the introspecting issuer, empty signature', `${unsignedToTheIdp}.`],
    ['segments that are not JSON', 'a.b.c'],
    ['three empty segments', '..'],
    ['a header with a character outside base64url', `${b64url({ alg: 'ES256' })}~.${b64url({ iss: ISSUER })}.AAAA`],
    ['base64 (not base64url) characters', `${b64url({ alg: 'ES256' })}.${b64url({ iss: ISSUER })}+/.AAAA`],
  ] as const

  it.for(malformed)('answers 401 malformed for %s', async ([, token], context) => {
    const s = await setup(context, false)
    await expectRefusedLocally(s, token, 'malformed')
    expect(await invalidReasons(s.gateway)).toEqual(new Set(['malformed']))
  })

  it('answers 401 for alg none with a filler signature naming an issuer that has only introspection', async (context) => {
    const s = await setup(context, false)
    await expectRefusedLocally(s, `${unsignedToTheIdp}.AAAA`, 'algorithm_not_allowed')
    expect(await invalidReasons(s.gateway)).toEqual(new Set(['disallowed_algorithm']))
  })

  it('answers 401, not 503, for an unsigned JWT while the introspection endpoint is down', async (context) => {
    const s = await setup(context, false)
    await s.idp.stop()
    for (const [, token] of malformed) await expectRefusedLocally(s, token, 'malformed')
    expect(deniedReasons(s.gateway)).toHaveLength(malformed.length)
    expect(s.gateway.logs.join('')).not.toContain('introspection_unavailable')
  })
})
