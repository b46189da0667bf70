/** Issue 4: refresh tokens and keys issued before a restart still work after it (SQLite in a temp dir). */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { startAuthServerGateway } from '../support/gateway.js'
import { closedPort } from '../support/upstream.js'
import { callApi, passwordGrant, passwordSetup, refresh } from '../support/authserver.js'

describe('a restart of the SQLite-backed server', () => {
  it('keeps signing keys, refresh tokens and revocations', async ({ onTestFinished }) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-restart-'))
    const setup = passwordSetup({ store: { type: 'sqlite', path: path.join(dir, 'portcullis.db') } })
    const port = await closedPort()
    const before = await startAuthServerGateway(setup, {}, { port })
    const first = (await passwordGrant(before)).body as { access_token: string; refresh_token: string }
    const revoked = (await passwordGrant(before)).body as { access_token: string }
    const { postForm, APP } = await import('../support/authserver.js')
    expect((await postForm(before, '/revoke', { token: revoked.access_token, ...APP })).status).toBe(200)
    const jwksBefore = await (await fetch(`${before.url}/jwks`)).json()
    await before.close()
    await new Promise((resolve) => setTimeout(resolve, 200))  // let pooled keep-alive sockets see the close

    const after = await startAuthServerGateway(setup, {}, { port })
    onTestFinished(() => after.close())
    expect(await (await fetch(`${after.url}/jwks`)).json()).toEqual(jwksBefore)
    expect((await callApi(after, first.access_token)).status).toBe(200)
    expect((await callApi(after, revoked.access_token)).status).toBe(401)
    const refreshed = await refresh(after, first.refresh_token)
    expect(refreshed.status).toBe(200)
    expect((await callApi(after, refreshed.body.access_token as string)).status).toBe(200)
  })
})
