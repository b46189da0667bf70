/**
 * Issue 19: registered clients live in the store. A restart of the SQLite-backed server keeps them; a
 * registration never used is deleted after `registration.unused_expiry` (the gateway's injected clock), one
 * used at /authorize or /token is kept; with Redis, a client registered on one instance is used and deleted
 * on another. Without REDIS_URL the Redis case is reported as skipped.
 */
import { randomUUID } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { startAuthServerGateway, startGateway, type RunningGateway } from '../../support/gateway.js'
import { basic, postForm } from '../../support/authserver.js'
import { testClock } from '../../support/clock.js'
import { deleteKeys } from '../../support/redis.js'
import { IAT, LOOPBACK, NATIVE_APP, manage, register, registrationSetup, storedRegistrations } from '../../support/registration.js'
import { closedPort } from '../../support/upstream.js'

const REDIS_URL = process.env.REDIS_URL
const MACHINE_POLICY = { initial_access_token: IAT, policy: { grant_types: ['authorization_code', 'refresh_token', 'client_credentials'] } }
const MACHINE = { grant_types: ['client_credentials'], token_endpoint_auth_method: 'client_secret_basic', scope: 'orders:read' }

type Registered = Record<string, unknown> & { client_id: string; registration_access_token: string; client_secret?: string }

async function registered(gateway: RunningGateway, metadata: unknown): Promise<Registered> {
  const res = await register(gateway, metadata, { token: IAT })
  expect(res.status, res.text).toBe(201)
  return res.body as Registered
}

function clientCredentials(gateway: RunningGateway, client: Registered) {
  return postForm(gateway, '/token', { grant_type: 'client_credentials' }, { authorization: basic(client.client_id, client.client_secret!) })
}

/** An authorization request of a registered native client: 302 to the login page when the client is known, a 400 page when not. */
async function authorize(gateway: RunningGateway, client: Registered): Promise<number> {
  const query = new URLSearchParams({
    response_type: 'code', client_id: client.client_id, redirect_uri: 'http://127.0.0.1:40123/callback', scope: 'orders:read', state: 'st',
    code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256',
  })
  const res = await fetch(`${gateway.url}/authorize?${query}`, { redirect: 'manual' })
  if (res.status === 302) expect(res.headers.get('location')).toMatch(/^\/login\?interaction=/)
  return res.status
}

describe('registered clients in the store', () => {
  it('survive a restart of the SQLite-backed server: secret, registration access token and redirect URIs', async ({ onTestFinished }) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-registration-'))
    const setup = registrationSetup(MACHINE_POLICY, { store: { type: 'sqlite', path: path.join(dir, 'portcullis.db') } })
    const port = await closedPort()
    const before = await startAuthServerGateway(setup, {}, { port })
    const machine = await registered(before, MACHINE)
    const native = await registered(before, NATIVE_APP)
    expect((await clientCredentials(before, machine)).status).toBe(200)
    await before.close()
    await new Promise((resolve) => setTimeout(resolve, 200))  // let pooled keep-alive sockets see the close

    const after = await startAuthServerGateway(setup, {}, { port })
    onTestFinished(() => after.close())
    expect((await clientCredentials(after, machine)).status).toBe(200)
    expect(await authorize(after, native)).toBe(302)
    const read = await manage(`${after.url}/register?client_id=${native.client_id}`, 'GET', native.registration_access_token)
    expect(read.body).toEqual(native)
  })

  it('deletes a registration never used after unused_expiry, and keeps those used at /authorize or /token', async ({ onTestFinished }) => {
    const clock = testClock()
    const gateway = await startAuthServerGateway(registrationSetup({ ...MACHINE_POLICY, unused_expiry: '1h' }), {}, { now: clock.now })
    onTestFinished(() => gateway.close())
    const [usedAtAuthorize, usedAtToken, unused, unusedMachine] = [
      await registered(gateway, NATIVE_APP), await registered(gateway, MACHINE), await registered(gateway, NATIVE_APP), await registered(gateway, MACHINE),
    ]
    clock.advance(30 * 60_000)
    expect(await authorize(gateway, usedAtAuthorize)).toBe(302)
    expect((await clientCredentials(gateway, usedAtToken)).status).toBe(200)
    // A wrong secret is no use.
    expect((await postForm(gateway, '/token', { grant_type: 'client_credentials' },
      { authorization: basic(unusedMachine.client_id, 'not-the-secret-0123456789') })).status).toBe(401)

    clock.advance(30 * 60_000 + 1000)
    expect(await authorize(gateway, unused)).toBe(400)
    expect(await authorize(gateway, usedAtAuthorize)).toBe(302)
    const refused = await clientCredentials(gateway, unusedMachine)
    expect([refused.status, refused.body.error]).toEqual([401, 'invalid_client'])
    expect((await clientCredentials(gateway, usedAtToken)).status).toBe(200)
    expect((await manage(`${gateway.url}/register?client_id=${unused.client_id}`, 'GET', unused.registration_access_token)).status).toBe(401)

    expect(await gateway.app.authServer!.ctx.store.purgeExpired()).toBeGreaterThanOrEqual(2)
    const kept = await storedRegistrations(gateway)
    expect(kept.map((record) => record.id).sort()).toEqual([usedAtAuthorize.client_id, usedAtToken.client_id].sort())
    // Used: kept for good (a century), with when it was first used.
    for (const record of kept) {
      expect(record.expiresAt).toBeGreaterThan(clock.now() + 50 * 365 * 86_400_000)
      expect(record.value.usedAt).toBe(clock.now() - 30 * 60_000 - 1000)
    }
  })
})

describe.skipIf(REDIS_URL === undefined)(`registered clients on Redis${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  it('a client registered on instance A is used, read and deleted on instance B, and is then gone on A too', async ({ onTestFinished }) => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const [portA, portB] = [await closedPort(), await closedPort()]
    const config = {
      upstreams: { echo: { url: 'builtin:echo' } },
      routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
      log: { level: 'warn' },
      authorization_server: {
        enabled: true, issuer: `http://127.0.0.1:${portA}`, store: { type: 'redis', url: REDIS_URL, prefix }, ...registrationSetup(MACHINE_POLICY),
      },
    }
    const a = await startGateway(config, { port: portA })
    const b = await startGateway(config, { port: portB })
    onTestFinished(async () => {
      await Promise.all([a.close(), b.close()])
      await deleteKeys(REDIS_URL!, prefix)
    })
    const machine = await registered(a, MACHINE)
    const native = await registered(a, { ...NATIVE_APP, redirect_uris: [LOOPBACK] })
    const tokens = await clientCredentials(b, machine)
    expect(tokens.status).toBe(200)
    expect((await fetch(`${a.url}/api/orders`, { headers: { authorization: `Bearer ${tokens.body.access_token as string}` } })).status).toBe(200)
    expect(await authorize(b, native)).toBe(302)
    const onB = (client: Registered) => `${b.url}/register?client_id=${client.client_id}`
    expect((await manage(onB(native), 'GET', native.registration_access_token)).body).toEqual(native)

    expect((await manage(onB(machine), 'DELETE', machine.registration_access_token)).status).toBe(204)
    expect((await clientCredentials(a, machine)).status).toBe(401)
    expect((await clientCredentials(b, machine)).status).toBe(401)
    expect((await storedRegistrations(a)).map((record) => record.id)).toEqual([native.client_id])
  })
})
