/**
 * Issue 6 item 4: the audit trail (docs/audit.md). Each security event's flow runs against the real gateway
 * and embedded server with `audit.output` a file in a temp dir; the file must hold one line per event with
 * the documented fields, apart from the request log, and no token, code, secret or password.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { describe, expect, it, type TestContext } from 'vitest'
import { stringify } from 'yaml'
import { auditOutputs, createAuditLog } from '../../src/audit/audit.js'
import { buildGateway } from '../../src/server/gateway.js'
import { loadConfig } from '../../src/check/load.js'
import { runPortcullis } from '../../src/server/run.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { ALICE, R1, TV1, basic, postForm, type OAuthResponse } from '../support/authserver.js'
import { FormBrowser, field, loginAndConsent, responseParams } from '../support/browser.js'
import { testClock } from '../support/clock.js'
import { lineCollector } from '../support/logs.js'

type Gateway = RunningGateway & { issuer: string }
type AuditLine = Record<string, unknown> & { time: string; event: string }

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const MACHINE = { client_id: 'machine', client_secret: 'machine-secret-3e7b1d9f0a' }
const APP = { client_id: 'app', client_secret: 'app-secret-6c2a8e4f1b' }
const WRONG_PASSWORD = 'not the right password at all'
const BOB = { username: 'bob', password: 'bob-password-5d9c3a7e' }

function setup() {
  return {
    access_token: { audience: ['orders-api'] },
    clients: [
      { ...MACHINE, grant_types: ['client_credentials'], scopes: ['orders:read'] },
      { ...APP, token_endpoint_auth_method: 'client_secret_post', grant_types: ['password', 'refresh_token'], first_party: true,
        scopes: ['orders:read'] },
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'],
        redirect_uris: [R1], scopes: ['openid', 'orders:read'] },
      { client_id: 'tv', token_endpoint_auth_method: 'none', grant_types: [DEVICE_GRANT], scopes: ['orders:read'] },
    ],
    users: [{ ...ALICE, sub: 'user-alice' }, BOB],
    throttling: { failures_per_client: 2, failures_per_ip: 100 },
  }
}

const tempFile = (name = 'audit.log') => path.join(mkdtempSync(path.join(tmpdir(), 'portcullis-audit-')), name)

/** The audit file's lines, each checked for the common shape: time first, then event. */
function readAudit(file: string): AuditLine[] {
  return readFileSync(file, 'utf8').split('\n').filter((line) => line !== '').map((line) => {
    const entry = JSON.parse(line) as AuditLine
    expect(Object.keys(entry).slice(0, 2)).toEqual(['time', 'event'])
    expect(new Date(entry.time).toISOString()).toBe(entry.time)
    expect(entry).not.toHaveProperty('level')
    expect(entry).not.toHaveProperty('msg')
    return entry
  })
}

interface Audited {
  gateway: Gateway
  file: string
  /** Every credential sent or issued, to search the file for. */
  secrets: Set<string>
  /** The lines written since the last call. */
  next(): AuditLine[]
}

async function start(context: TestContext, options: { now?: () => number } = {}): Promise<Audited> {
  const file = tempFile()
  const gateway = await startAuthServerGateway(setup(), { audit: { output: file } }, options)
  context.onTestFinished(() => gateway.close())
  const secrets = new Set([MACHINE.client_secret, APP.client_secret, ALICE.password, BOB.password, WRONG_PASSWORD, TV1.verifier])
  let seen = 0
  return {
    gateway, file, secrets,
    next() {
      const lines = readAudit(file)
      const fresh = lines.slice(seen)
      seen = lines.length
      return fresh
    },
  }
}

/** A 200 token response; its tokens join the secrets. */
function tokens(audited: Audited, res: OAuthResponse): { access_token: string; refresh_token?: string } {
  expect(res.status, res.text).toBe(200)
  for (const name of ['access_token', 'refresh_token', 'id_token']) if (typeof res.body[name] === 'string') audited.secrets.add(res.body[name])
  return res.body as { access_token: string; refresh_token?: string }
}

function expectNoSecrets(audited: Audited): void {
  const text = readFileSync(audited.file, 'utf8')
  for (const secret of audited.secrets) expect(text.includes(secret), `a secret (${secret.slice(0, 6)}…) is in the audit trail`).toBe(false)
}

/** Alice through /authorize, login and consent for spa; returns the code. */
async function authorize(audited: Audited, decision: 'allow' | 'deny' = 'allow'): Promise<URLSearchParams> {
  const browser = new FormBrowser(audited.gateway.url)
  const query = new URLSearchParams({
    response_type: 'code', client_id: 'spa', redirect_uri: R1, scope: 'openid orders:read', state: 's-1',
    code_challenge: TV1.challenge, code_challenge_method: 'S256',
  })
  const done = await loginAndConsent(browser, await browser.get(`/authorize?${query}`), ALICE, { decision })
  for (const value of browser.cookies.values()) audited.secrets.add(value)
  const params = responseParams(done.location)
  const code = params.get('code')
  if (code !== null) audited.secrets.add(code)
  return params
}

const redeem = (audited: Audited, code: string) => postForm(audited.gateway, '/token', {
  grant_type: 'authorization_code', client_id: 'spa', code, redirect_uri: R1, code_verifier: TV1.verifier,
})

describe('audit events of the token endpoint and revocation', () => {
  it('token.issued names grant type, client, subject, jti and grant for each grant, never the token', async (context) => {
    const audited = await start(context)
    const machine = tokens(audited, await postForm(audited.gateway, '/token', { grant_type: 'client_credentials' },
      { authorization: basic(MACHINE.client_id, MACHINE.client_secret) }))
    tokens(audited, await postForm(audited.gateway, '/token', { grant_type: 'password', ...ALICE, ...APP }))
    const issued = audited.next().filter((line) => line.event === 'token.issued')
    expect(issued).toHaveLength(2)
    expect(issued[0]).toMatchObject({
      grant_type: 'client_credentials', client_id: 'machine', sub: 'machine', scope: 'orders:read',
      refresh_token_issued: false, id_token_issued: false, ip: '127.0.0.1', req_id: expect.any(String),
    })
    expect(issued[0]!.jti).toMatch(/^[0-9a-f-]{36}$/)
    expect(issued[1]).toMatchObject({ grant_type: 'password', client_id: 'app', sub: 'user-alice', refresh_token_issued: true })
    expect(issued[1]!.grant_id).toMatch(/^[0-9a-f-]{36}$/)
    // The jti is the access token's own.
    const payload = JSON.parse(Buffer.from(machine.access_token.split('.')[1]!, 'base64url').toString()) as { jti: string }
    expect(issued[0]!.jti).toBe(payload.jti)
    expectNoSecrets(audited)
  })

  it('token.refreshed for a refresh, in the same grant; token.revoked for an access and a refresh token', async (context) => {
    const audited = await start(context)
    const first = tokens(audited, await postForm(audited.gateway, '/token', { grant_type: 'password', ...ALICE, ...APP }))
    const refreshed = tokens(audited, await postForm(audited.gateway, '/token', {
      grant_type: 'refresh_token', refresh_token: first.refresh_token!, ...APP,
    }))
    const [issued, renewed] = audited.next()
    expect(renewed).toMatchObject({ event: 'token.refreshed', grant_type: 'refresh_token', client_id: 'app', sub: 'user-alice',
      grant_id: issued!.grant_id, refresh_token_issued: true })
    expect(renewed!.jti).not.toBe(issued!.jti)

    expect((await postForm(audited.gateway, '/revoke', { token: refreshed.access_token, ...APP })).status).toBe(200)
    expect((await postForm(audited.gateway, '/revoke', { token: refreshed.refresh_token!, ...APP })).status).toBe(200)
    // Unknown or already revoked: 200 as RFC 7009 says, and nothing to audit.
    expect((await postForm(audited.gateway, '/revoke', { token: refreshed.refresh_token!, ...APP })).status).toBe(200)
    const revoked = audited.next()
    expect(revoked).toEqual([
      expect.objectContaining({ event: 'token.revoked', token_type: 'access_token', client_id: 'app', sub: 'user-alice',
        jti: renewed!.jti, grant_id: issued!.grant_id }),
      expect.objectContaining({ event: 'token.revoked', token_type: 'refresh_token', client_id: 'app', sub: 'user-alice',
        grant_id: issued!.grant_id }),
    ])
    expect(revoked[1]).not.toHaveProperty('jti')
    expectNoSecrets(audited)
  })

  it('client.authentication_failed says why; throttle.engaged comes once, when the allowance is used up', async (context) => {
    const audited = await start(context)
    const wrong = ['wrong-secret-one-0a1b2c', 'wrong-secret-two-3d4e5f', 'wrong-secret-three-6a7b8c']
    for (const secret of wrong) audited.secrets.add(secret)
    const statuses: number[] = []
    for (const secret of wrong) {
      statuses.push((await postForm(audited.gateway, '/token', { grant_type: 'client_credentials' },
        { authorization: basic(MACHINE.client_id, secret) })).status)
    }
    statuses.push((await postForm(audited.gateway, '/token', { grant_type: 'client_credentials', client_id: 'nobody', client_secret: 'x-secret-99' })).status)
    audited.secrets.add(basic(MACHINE.client_id, wrong[0]!).slice(6))
    expect(statuses).toEqual([401, 401, 429, 401])
    expect(audited.next()).toEqual([
      expect.objectContaining({ event: 'client.authentication_failed', client_id: 'machine', method: 'client_secret_basic',
        reason: 'wrong_secret', endpoint: '/token', ip: '127.0.0.1' }),
      expect.objectContaining({ event: 'throttle.engaged', throttle: 'failures', key: 'client:machine', retry_after: expect.any(Number) }),
      expect.objectContaining({ event: 'client.authentication_failed', client_id: 'machine', reason: 'wrong_secret' }),
      expect.objectContaining({ event: 'client.authentication_failed', client_id: 'nobody', method: 'client_secret_post',
        reason: 'unknown_client' }),
    ])
    expectNoSecrets(audited)
  })
})

describe('audit events of the pages', () => {
  it('login.failed, login.succeeded and consent.granted, then token.issued for the code', async (context) => {
    const audited = await start(context)
    const browser = new FormBrowser(audited.gateway.url)
    const query = new URLSearchParams({
      response_type: 'code', client_id: 'spa', redirect_uri: R1, scope: 'openid orders:read', state: 's-1',
      code_challenge: TV1.challenge, code_challenge_method: 'S256',
    })
    const login = await browser.get((await browser.get(`/authorize?${query}`)).location!)
    const refused = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'),
      username: ALICE.username, password: WRONG_PASSWORD })
    expect(refused.status).toBe(401)
    const done = await loginAndConsent(browser, refused, ALICE, { remember: true })
    const code = responseParams(done.location).get('code')!
    audited.secrets.add(code)
    for (const value of browser.cookies.values()) audited.secrets.add(value)
    tokens(audited, await redeem(audited, code))
    expect(audited.next()).toEqual([
      expect.objectContaining({ event: 'login.failed', username: 'alice', reason: 'invalid_credentials', ip: '127.0.0.1' }),
      expect.objectContaining({ event: 'login.succeeded', username: 'alice', sub: 'user-alice', flow: 'authorize', client_id: 'spa' }),
      expect.objectContaining({ event: 'consent.granted', sub: 'user-alice', client_id: 'spa', scope: 'openid orders:read', remembered: true }),
      expect.objectContaining({ event: 'token.issued', grant_type: 'authorization_code', client_id: 'spa', sub: 'user-alice',
        id_token_issued: true, refresh_token_issued: true }),
    ])
    expectNoSecrets(audited)
  })

  it('consent.denied when the user says no', async (context) => {
    const audited = await start(context)
    expect((await authorize(audited, 'deny')).get('error')).toBe('access_denied')
    expect(audited.next().map((line) => line.event)).toEqual(['login.succeeded', 'consent.denied'])
    expectNoSecrets(audited)
  })

  it('device_code.approved and device_code.denied name the user, client and scope, never the user code', async (context) => {
    const audited = await start(context)
    const browser = new FormBrowser(audited.gateway.url)
    const login = await browser.get('/device')
    const back = await browser.post('/login', { _csrf: field(login, '_csrf'), interaction: field(login, 'interaction'), ...ALICE })
    let page = await browser.get(back.location!)
    const deviceCodes: string[] = []
    for (const decision of ['approve', 'deny'] as const) {
      const device = await postForm(audited.gateway, '/device_authorization', { client_id: 'tv' })
      const userCode = device.body.user_code as string
      deviceCodes.push(device.body.device_code as string)
      for (const secret of [device.body.device_code as string, userCode, userCode.replace('-', '')]) audited.secrets.add(secret)
      const confirm = await browser.post('/device', { _csrf: field(page, '_csrf'), user_code: userCode })
      page = await browser.post('/device', { _csrf: field(confirm, '_csrf'), user_code: field(confirm, 'user_code'), decision })
      expect(page.status).toBe(200)
      page = await browser.get('/device')
    }
    for (const value of browser.cookies.values()) audited.secrets.add(value)
    tokens(audited, await postForm(audited.gateway, '/token', { grant_type: DEVICE_GRANT, device_code: deviceCodes[0]!, client_id: 'tv' }))
    const fields = { sub: 'user-alice', client_id: 'tv', scope: 'orders:read', ip: '127.0.0.1' }
    expect(audited.next()).toEqual([
      expect.objectContaining({ event: 'login.succeeded', flow: 'device' }),
      expect.objectContaining({ event: 'device_code.approved', ...fields }),
      expect.objectContaining({ event: 'device_code.denied', ...fields }),
      expect.objectContaining({ event: 'token.issued', grant_type: DEVICE_GRANT, client_id: 'tv', sub: 'user-alice' }),
    ])
    expectNoSecrets(audited)
  })

  it('throttle.engaged once when failed sign-ins lock a username', async (context) => {
    const audited = await start(context)
    const browser = new FormBrowser(audited.gateway.url)
    let page = await browser.get('/device')
    const statuses: number[] = []
    for (let attempt = 0; attempt < 3; attempt++) {
      page = await browser.post('/login', { _csrf: field(page, '_csrf'), interaction: field(page, 'interaction'),
        username: 'bob', password: WRONG_PASSWORD })
      statuses.push(page.status)
    }
    expect(statuses).toEqual([401, 401, 429])
    expect(audited.next().map((line) => [line.event, line.key ?? line.username])).toEqual([
      ['login.failed', 'bob'], ['throttle.engaged', 'user:bob'], ['login.failed', 'bob'],
    ])
    expectNoSecrets(audited)
  })
})

describe('audit events of replays', () => {
  it('authorization_code.replay_detected when a redeemed code comes back: its grant is revoked', async (context) => {
    const audited = await start(context)
    const code = (await authorize(audited)).get('code')!
    tokens(audited, await redeem(audited, code))
    expect((await redeem(audited, code)).status).toBe(400)
    const lines = audited.next()
    const issued = lines.find((line) => line.event === 'token.issued')!
    expect(lines.at(-1)).toMatchObject({ event: 'authorization_code.replay_detected', client_id: 'spa', sub: 'user-alice',
      grant_id: issued.grant_id, grant_revoked: true, ip: '127.0.0.1' })
    expectNoSecrets(audited)
  })

  it('refresh_token.reuse_detected when a rotated refresh token comes back: the family is revoked', async (context) => {
    const clock = testClock()
    const audited = await start(context, { now: clock.now })
    const first = tokens(audited, await postForm(audited.gateway, '/token', { grant_type: 'password', ...ALICE, ...APP }))
    tokens(audited, await postForm(audited.gateway, '/token', { grant_type: 'refresh_token', refresh_token: first.refresh_token!, ...APP }))
    // Any time later (no reuse_grace configured: at once too).
    clock.advance(5000)
    const reused = await postForm(audited.gateway, '/token', { grant_type: 'refresh_token', refresh_token: first.refresh_token!, ...APP })
    expect(reused.status).toBe(400)
    const [issued, , reuse] = audited.next()
    expect(reuse).toMatchObject({ event: 'refresh_token.reuse_detected', client_id: 'app', sub: 'user-alice',
      grant_id: issued!.grant_id, grant_revoked: true })
    expect(reuse!.time).toBe(new Date(clock.now()).toISOString())
    expectNoSecrets(audited)
  })
})

describe('audit events of the process', () => {
  it('config.reloaded and config.reload_failed, on their own: none in the request log', async (context) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-audit-'))
    const file = path.join(dir, 'portcullis.yaml')
    const auditFile = path.join(dir, 'audit.log')
    const config = (level: string) => ({
      upstreams: { echo: { url: 'builtin:echo' } },
      routes: [{ id: 'open', path: '/**', upstream: 'echo', auth: 'none' }],
      log: { level },
      audit: { output: auditFile },
    })
    writeFileSync(file, stringify(config('info')))
    const { lines: logs, stream: logStream } = lineCollector()
    const running = await runPortcullis(file, { port: 0, watch: false, logStream })
    context.onTestFinished(() => running.shutdown('test'))
    writeFileSync(file, stringify(config('debug')))
    expect(await running.reload('SIGHUP')).toBe(true)
    writeFileSync(file, 'routes: [')
    expect(await running.reload('SIGHUP')).toBe(false)
    rmSync(file)
    expect(await running.reload('api')).toBe(false)
    expect(readAudit(auditFile)).toEqual([
      expect.objectContaining({ event: 'config.reloaded', trigger: 'SIGHUP', sha256: expect.stringMatching(/^[0-9a-f]{64}$/), needs_restart: [] }),
      expect.objectContaining({ event: 'config.reload_failed', trigger: 'SIGHUP', reason: 'invalid', problems: expect.any(Number) }),
      expect.objectContaining({ event: 'config.reload_failed', trigger: 'api', reason: 'unreadable', problems: 1 }),
    ])
    expect(logs.join('')).not.toContain('"event":')
  })
})

describe('audit.output', () => {
  it('defaults to stdout, which never throws', async () => {
    expect(auditOutputs(undefined)).toEqual(['stdout'])
    expect(auditOutputs({ output: '/var/log/a.log' })).toEqual(['/var/log/a.log'])
    const audit = createAuditLog(undefined)
    expect(() => audit.emit('config.reloaded', { trigger: 'test', sha256: '0'.repeat(64), needs_restart: [] })).not.toThrow()
    await audit.close()
  })

  it('writes to every output of a list, stdout and a file in a directory it creates', async () => {
    const file = path.join(tempFile(), 'nested', 'audit.log')
    const audit = createAuditLog({ output: ['stdout', file] }, { now: () => Date.UTC(2030, 0, 2, 3, 4, 5) })
    audit.emit('throttle.engaged', { throttle: 'failures', key: 'client:a', retry_after: 60 })
    await audit.close()
    expect(readFileSync(file, 'utf8')).toBe('{"time":"2030-01-02T03:04:05.000Z","event":"throttle.engaged","throttle":"failures","key":"client:a","retry_after":60}\n')
  })

  it('a gateway without `audit:` builds, and its audit log goes to the stream it is given', async () => {
    const lines: string[] = []
    const auditStream = new Writable({ write(chunk, _encoding, callback) { lines.push(String(chunk)); callback() } })
    const text = stringify({ upstreams: { echo: { url: 'builtin:echo' } }, routes: [{ id: 'open', path: '/**', upstream: 'echo', auth: 'none' }] })
    const app = await buildGateway(loadConfig('portcullis.yaml', text), { auditStream, logStream: new Writable({ write: (_c, _e, cb) => cb() }) })
    app.audit.emit('config.reload_failed', { trigger: 'test', reason: 'invalid', problems: 2 })
    await app.close()
    expect(lines).toHaveLength(1)
    expect(JSON.parse(lines[0]!)).toMatchObject({ event: 'config.reload_failed', problems: 2 })
  })

  // Enable with the resolvePaths() line for audit.output in src/config/load.ts (as store.path); until then a
  // relative path resolves against the working directory.
  it('a relative path resolves against the config file\'s directory', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-audit-'))
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, stringify({ upstreams: { echo: { url: 'builtin:echo' } }, routes: [{ id: 'open', path: '/**', upstream: 'echo', auth: 'none' }],
      audit: { output: 'audit-relative/audit.log' } }))
    const running = await runPortcullis(file, { port: 0, watch: false, logStream: new Writable({ write: (_c, _e, cb) => cb() }) })
    running.gateway.audit.emit('config.reload_failed', { trigger: 'test', reason: 'invalid', problems: 1 })
    await running.shutdown('test')
    expect(readAudit(path.join(dir, 'audit-relative', 'audit.log'))).toEqual([expect.objectContaining({ event: 'config.reload_failed' })])
  })

  it('an output that cannot be opened fails the start, naming it', () => {
    const file = tempFile()
    writeFileSync(file, '')
    expect(() => createAuditLog({ output: path.join(file, 'audit.log') })).toThrow(`audit.output ${path.join(file, 'audit.log')} cannot be opened`)
  })
})
