/**
 * Issue 16 item 2: refresh-token reuse, and the reuse grace. By default any presentation of a rotated-out
 * refresh token revokes its family (RFC 9700 §4.14.2), parallel refreshes of one token included. With
 * `refresh_token.reuse_grace` (or a client's `refresh_token_reuse_grace`), the same client asking for the
 * same scope and audience within the grace, while the new refresh token is unused, gets the same response
 * again: the same tokens, never a second family (checklist RT-05). Run on the memory and the SQLite store.
 */
import { describe, expect, it, type TestContext } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { startAuthServerGateway } from '../support/gateway.js'
import { APP, OTHER, RS, basic, callApi, passwordGrant, passwordSetup, postForm, refresh } from '../support/authserver.js'

type Tokens = { access_token: string; refresh_token: string; expires_in: number; scope: string }
const STORES = [{ type: 'memory' }, { type: 'sqlite', path: './portcullis.db' }] as const

async function start(context: TestContext, extra: Record<string, unknown>, options: { now?: () => number } = {}) {
  const gateway = await startAuthServerGateway(passwordSetup(extra), {}, options)
  context.onTestFinished(() => gateway.close())
  return gateway
}

type Gateway = Awaited<ReturnType<typeof start>>

async function login(gateway: Gateway, client = APP, scope = 'orders:read orders:write'): Promise<Tokens> {
  const res = await passwordGrant(gateway, scope, client)
  expect(res.status, res.text).toBe(200)
  return res.body as Tokens
}

async function active(gateway: Gateway, token: string): Promise<boolean> {
  return (await postForm(gateway, '/introspect', { token }, { authorization: basic(RS.client_id, RS.client_secret) })).body.active === true
}

function auditEvents(gateway: Gateway, event: string): Array<Record<string, unknown>> {
  return gateway.audit.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === event)
}

/** The family is dead: the newest refresh token is refused and the access token inactive. */
async function expectRevoked(gateway: Gateway, newest: Tokens): Promise<void> {
  const res = await refresh(gateway, newest.refresh_token)
  expect([res.status, res.body.error]).toEqual([400, 'invalid_grant'])
  expect(await active(gateway, newest.access_token)).toBe(false)
  expect((await callApi(gateway, newest.access_token)).status).toBe(401)
}

/** APP with its own grace (the other clients as passwordSetup has them). */
function withClientGrace(grace: string): Record<string, unknown>[] {
  return (passwordSetup().clients as Array<Record<string, unknown>>)
    .map((client) => client.client_id === APP.client_id ? { ...client, refresh_token_reuse_grace: grace } : client)
}

describe.each(STORES)('refresh reuse on the $type store (issue 16 item 2)', (store) => {
  it('without a grace, twenty parallel refreshes: exactly one 200, 19 invalid_grant, and the whole family dead, the winner\'s tokens too', async (context) => {
    const gateway = await start(context, { store })
    const first = await login(gateway)
    const results = await Promise.all(Array.from({ length: 20 }, () => refresh(gateway, first.refresh_token)))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    expect(results.filter((res) => res.status === 400 && res.body.error === 'invalid_grant')).toHaveLength(19)
    await expectRevoked(gateway, results.find((res) => res.status === 200)!.body as Tokens)
    expect(await active(gateway, first.access_token)).toBe(false)
    expect(auditEvents(gateway, 'refresh_token.reuse_detected').length).toBeGreaterThanOrEqual(1)
  })

  it('with reuse_grace, twenty parallel refreshes all get the same response, and the family lives on', async (context) => {
    const gateway = await start(context, { store, refresh_token: { reuse_grace: '5s' } })
    const first = await login(gateway)
    const results = await Promise.all(Array.from({ length: 20 }, () => refresh(gateway, first.refresh_token)))
    expect(results.map((res) => res.status)).toEqual(Array(20).fill(200))
    const [one] = results.map((res) => res.body as Tokens)
    for (const res of results) expect(res.body).toMatchObject({ access_token: one!.access_token, refresh_token: one!.refresh_token, scope: one!.scope })
    // One rotation, replayed: not a second family. Its refresh token rotates once, as any other.
    expect(auditEvents(gateway, 'refresh_token.replayed_in_grace')).toHaveLength(19)
    expect(auditEvents(gateway, 'refresh_token.reuse_detected')).toEqual([])
    expect((await callApi(gateway, one!.access_token)).status).toBe(200)
    const next = await refresh(gateway, one!.refresh_token)
    expect(next.status).toBe(200)
    // Its refresh token used, the first one is plain reuse again, grace or not.
    const again = await refresh(gateway, first.refresh_token)
    expect([again.status, again.body.error]).toEqual([400, 'invalid_grant'])
    await expectRevoked(gateway, next.body as Tokens)
  })
})

describe('the reuse grace (issue 16 item 2)', () => {
  it('within the grace the same request gets the same tokens, expires_in counting down; past it the replay revokes the family', async (context) => {
    let clock = Date.now()
    const gateway = await start(context, { refresh_token: { reuse_grace: '5s' } }, { now: () => clock })
    const first = await login(gateway)
    const rotated = (await refresh(gateway, first.refresh_token)).body as Tokens
    clock += 2000
    const replayed = await refresh(gateway, first.refresh_token)
    expect(replayed.status).toBe(200)
    expect(replayed.body).toEqual({ ...rotated, expires_in: rotated.expires_in - 2 })
    const [event] = auditEvents(gateway, 'refresh_token.replayed_in_grace')
    expect(event).toMatchObject({ client_id: APP.client_id, sub: 'alice', ip: '127.0.0.1' })
    clock += 3001
    const late = await refresh(gateway, first.refresh_token)
    expect([late.status, late.body.error]).toEqual([400, 'invalid_grant'])
    await expectRevoked(gateway, rotated)
  })

  it('a replay within the grace that asks for another scope, or comes after the new refresh token was used, revokes the family', async (context) => {
    const gateway = await start(context, { refresh_token: { reuse_grace: '10s' } })
    const first = await login(gateway)
    const rotated = (await refresh(gateway, first.refresh_token)).body as Tokens
    const narrower = await refresh(gateway, first.refresh_token, APP, 'orders:read')
    expect([narrower.status, narrower.body.error]).toEqual([400, 'invalid_grant'])
    await expectRevoked(gateway, rotated)

    const second = await login(gateway)
    const used = (await refresh(gateway, second.refresh_token)).body as Tokens
    const moved = (await refresh(gateway, used.refresh_token)).body as Tokens
    const stale = await refresh(gateway, second.refresh_token)
    expect([stale.status, stale.body.error]).toEqual([400, 'invalid_grant'])
    await expectRevoked(gateway, moved)
  })

  it('a client\'s refresh_token_reuse_grace overrides the server\'s, either way', async (context) => {
    const graceForApp = await start(context, { clients: withClientGrace('5s') })
    const first = await login(graceForApp)
    const rotated = await refresh(graceForApp, first.refresh_token)
    expect((await refresh(graceForApp, first.refresh_token)).body).toEqual(rotated.body)
    const other = await login(graceForApp, OTHER, 'orders:read')
    await refresh(graceForApp, other.refresh_token, OTHER)
    expect((await refresh(graceForApp, other.refresh_token, OTHER)).status).toBe(400)

    const noneForApp = await start(context, { refresh_token: { reuse_grace: '5s' }, clients: withClientGrace('0s') })
    const mine = await login(noneForApp)
    const rotatedMine = (await refresh(noneForApp, mine.refresh_token)).body as Tokens
    expect((await refresh(noneForApp, mine.refresh_token)).status).toBe(400)
    await expectRevoked(noneForApp, rotatedMine)
  })

  it('the kept response is useless without the old refresh token: the store holds it sealed, and its hash opens nothing', async (context) => {
    const gateway = await start(context, { refresh_token: { reuse_grace: '5s' } })
    const first = await login(gateway)
    const rotated = (await refresh(gateway, first.refresh_token)).body as Tokens
    const kept = await gateway.app.authServer!.ctx.store.list('refresh_successor')
    expect(kept).toHaveLength(1)
    const text = JSON.stringify(kept)
    for (const secret of [rotated.access_token, rotated.refresh_token, rotated.access_token.split('.')[1]!]) expect(text).not.toContain(secret)
  })

  it('portcullis check refuses a grace over 10s, and a client grace without the refresh_token grant', () => {
    const config = (as: Record<string, unknown>) => JSON.stringify({
      upstreams: { main: { url: 'http://127.0.0.1:9001' } }, routes: [{ id: 'all', path: '/**', upstream: 'main' }],
      authorization_server: { enabled: true, issuer: 'http://127.0.0.1:8080', ...as },
    })
    expect(() => loadConfig('as.yaml', config({ refresh_token: { reuse_grace: '11s' } }), {}))
      .toThrow(/authorization_server\.refresh_token\.reuse_grace: must be at most 10s/)
    expect(() => loadConfig('as.yaml', config({ clients: [{ ...RS, grant_types: ['client_credentials'], scopes: [], refresh_token_reuse_grace: '1s' }] }), {}))
      .toThrow(/authorization_server\.clients\[0\]\.refresh_token_reuse_grace: is only used with the refresh_token grant/)
    expect(() => loadConfig('as.yaml', config({ refresh_token: { reuse_grace: '10s' } }), {})).not.toThrow()
  })
})
