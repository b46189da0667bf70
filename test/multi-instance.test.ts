/**
 * Several instances on one Redis (issue 7): two real gateways with embedded servers, sharing the store at
 * REDIS_URL under a prefix of their own, on loopback. Tokens, refresh families, codes and revocations hold
 * across them. Without REDIS_URL the suite is reported as skipped.
 */
import { randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { stringify } from 'yaml'
import { describe, expect, it, type TestContext } from 'vitest'
import { codeId, issueAuthorizationCode } from '../src/authserver/authorization-codes.js'
import { startAuthServerGateway, type RunningGateway } from './support/gateway.js'
import { ALICE, APP, TV2, callApi, passwordGrant, passwordSetup, postForm, refresh } from './support/authserver.js'
import { CLI, spawnProcess, waitFor } from './support/cli.js'
import { closedPort } from './support/upstream.js'

const REDIS_URL = process.env.REDIS_URL
type Gateway = RunningGateway & { issuer: string }

async function pair(context: TestContext): Promise<{ a: Gateway; b: Gateway; prefix: string }> {
  const prefix = `{portcullis-test-${randomUUID()}}:`
  const store = { type: 'redis', url: REDIS_URL, prefix }
  const a = await startAuthServerGateway(passwordSetup({ store }))
  const b = await startAuthServerGateway(passwordSetup({ store, issuer: a.issuer }))
  context.onTestFinished(async () => {
    await Promise.all([a.close(), b.close()])
    await deleteKeys(prefix)
  })
  return { a, b, prefix }
}

async function deleteKeys(prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL!)
  const keys = await redis.keys(`${prefix}*`)
  if (keys.length > 0) await redis.del(...keys)
  await redis.quit()
}

describe.skipIf(REDIS_URL === undefined)(`two instances sharing one Redis${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  it('two processes (the compiled CLI): a token issued by A passes B, and a revocation on A is refused by B within 1 s', async (context) => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const [portA, portB] = [await closedPort(), await closedPort()]
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-pair-'))
    const base = {
      upstreams: { echo: { url: 'builtin:echo' } },
      routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
      log: { level: 'warn' },
      audit: { output: path.join(dir, 'audit.log') },
      authorization_server: { enabled: true, issuer: `http://127.0.0.1:${portA}`, store: { type: 'redis', url: REDIS_URL, prefix }, ...passwordSetup() },
    }
    const processes = [portA, portB].map((port, i) => {
      const file = path.join(dir, `${i}.yaml`)
      writeFileSync(file, stringify({ ...base, server: { listen: `127.0.0.1:${port}` } }))
      return spawnProcess(process.execPath, [CLI, 'start', '--config', file], { env: { PATH: process.env.PATH } })
    })
    context.onTestFinished(async () => {
      for (const running of processes) running.kill()
      await deleteKeys(prefix)
    })
    const [a, b] = [portA, portB].map((port) => ({ url: `http://127.0.0.1:${port}` }) as RunningGateway)
    await waitFor('instance B to serve', async () => (await fetch(`${b!.url}/jwks`)).status === 200, 15_000)
    const tokens = await (async () => {
      for (;;) {
        const res = await passwordGrant(a!, 'orders:read').catch(() => undefined)
        if (res?.status === 200) return res
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    })()
    const token = tokens.body.access_token as string
    expect((await callApi(b!, token)).status).toBe(200)
    expect((await postForm(a!, '/revoke', { token, ...APP })).status).toBe(200)
    await waitFor('B to refuse the revoked token', async () => (await callApi(b!, token)).status === 401, 1000)
  })

  it('a token issued by A passes B\'s gateway, and both sign with the same key', async (context) => {
    const { a, b } = await pair(context)
    const tokens = await passwordGrant(a, 'orders:read')
    expect(tokens.status).toBe(200)
    expect((await callApi(b, tokens.body.access_token as string)).status).toBe(200)
    const jwks = async (gateway: Gateway) => (await (await fetch(`${gateway.url}/jwks`)).json()) as { keys: Array<{ kid: string }> }
    expect((await jwks(a)).keys.map((key) => key.kid).sort()).toEqual((await jwks(b)).keys.map((key) => key.kid).sort())
  })

  it('refresh on A, then the old refresh token on B: invalid_grant, and the family is dead on both', async (context) => {
    const { a, b } = await pair(context)
    const first = await passwordGrant(a, 'orders:read')
    const rotated = await refresh(a, first.body.refresh_token as string)
    expect(rotated.status).toBe(200)
    // Past the lost-race window (2 s), a second presentation is reuse.
    await new Promise((resolve) => setTimeout(resolve, 2100))
    const reuse = await refresh(b, first.body.refresh_token as string)
    expect([reuse.status, reuse.body.error]).toEqual([400, 'invalid_grant'])
    expect((await refresh(a, rotated.body.refresh_token as string)).body.error).toBe('invalid_grant')
    expect((await refresh(b, rotated.body.refresh_token as string)).body.error).toBe('invalid_grant')
    // The family's access token is refused by both gateways.
    for (const gateway of [a, b]) expect((await callApi(gateway, rotated.body.access_token as string)).status).toBe(401)
  })

  it('a revocation on A is refused by B within 1 s, although B had the token cached', async (context) => {
    const { a, b } = await pair(context)
    const tokens = await passwordGrant(a, 'orders:read')
    const token = tokens.body.access_token as string
    expect((await callApi(b, token)).status).toBe(200)
    expect((await postForm(a, '/revoke', { token, ...APP })).status).toBe(200)
    await waitFor('B to refuse the revoked token', async () => (await callApi(b, token)).status === 401, 1000)
  })

  it('20 concurrent refreshes of one token spread over both instances: exactly one success', async (context) => {
    const { a, b } = await pair(context)
    const first = await passwordGrant(a, 'orders:read')
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => refresh(i % 2 === 0 ? a : b, first.body.refresh_token as string)))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    expect(results.filter((res) => res.status === 400 && res.body.error === 'invalid_grant')).toHaveLength(19)
  })

  it('10 concurrent redemptions of one code across both instances: exactly one success', async (context) => {
    const { a, b } = await pair(context)
    const ctx = a.app.authServer!.ctx
    const client = ctx.clients.find('public-app')!
    const code = await issueAuthorizationCode(ctx, {
      client, redirectUri: client.redirectUris[0]!, redirectUriWasSent: true, scope: ['orders:read'], sub: ALICE.username,
      authTime: Math.floor(Date.now() / 1000), codeChallenge: TV2.challenge, codeChallengeMethod: 'S256',
    })
    expect(await b.app.authServer!.ctx.store.find('authorization_code', codeId(code))).toBeDefined()
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => postForm(i % 2 === 0 ? a : b, '/token', {
      grant_type: 'authorization_code', client_id: 'public-app', code, redirect_uri: client.redirectUris[0]!, code_verifier: TV2.verifier,
    })))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    expect(results.filter((res) => res.body.error === 'invalid_grant')).toHaveLength(9)
  })

  it('brute-force counters are shared: failures spread over both instances are counted once', async (context) => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const store = { type: 'redis', url: REDIS_URL, prefix }
    const throttling = { failures_per_client: 3, failures_per_ip: 1000 }
    const a = await startAuthServerGateway(passwordSetup({ store, throttling }))
    const b = await startAuthServerGateway(passwordSetup({ store, throttling, issuer: a.issuer }))
    context.onTestFinished(async () => {
      await Promise.all([a.close(), b.close()])
      await deleteKeys(prefix)
    })
    const wrong = (gateway: Gateway) => postForm(gateway, '/token', { grant_type: 'password', ...ALICE, password: 'wrong', ...APP })
    expect((await wrong(a)).body.error).toBe('invalid_grant')
    expect((await wrong(b)).body.error).toBe('invalid_grant')
    expect((await wrong(a)).body.error).toBe('invalid_grant')
    // Three failures for alice, on two instances: the next attempt on either is refused, the right password too.
    for (const gateway of [a, b]) {
      const locked = await passwordGrant(gateway, 'orders:read')
      expect([locked.status, locked.body.error]).toEqual([429, 'temporarily_unavailable'])
    }
  })

  it('an instance whose subscription was lost reloads the deny-list and drops its cached embedded tokens when it is back', async (context) => {
    const { a, b } = await pair(context)
    const tokens = await passwordGrant(a, 'orders:read')
    const token = tokens.body.access_token as string
    expect((await callApi(b, token)).status).toBe(200)
    // A revocation B never heard of: written to the store without a message (as if B was away when it went out).
    const { jti, exp } = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { jti: string; exp: number }
    await a.app.authServer!.ctx.store.upsert('revoked_jti', jti, { exp }, exp - Math.floor(Date.now() / 1000))
    expect((await callApi(b, token)).status).toBe(200)
    const admin = new Redis(REDIS_URL!)
    context.onTestFinished(() => { void admin.quit() })
    await admin.client('KILL', 'TYPE', 'pubsub')
    await waitFor('B to resynchronise and refuse the token', async () => (await callApi(b, token)).status === 401, 5000)
  })
})
