/**
 * Issue 16 item 3: the private signing keys at rest, sealed with `signing.key_encryption_key`. The real
 * gateway on SQLite in a temp dir (and on the shared Redis under a prefix of its own), `portcullis start`,
 * `keys rekey` and `keys rotate` as users run them, and the raw bytes of the store read back.
 */
import { randomBytes, randomUUID } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import Database from 'better-sqlite3'
import { Redis } from 'ioredis'
import { jwtVerify } from 'jose'
import { stringify } from 'yaml'
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { KeyEncryptionKey } from '../../src/authserver/key-encryption.js'
import { KeyManager, type KeyManagerOptions } from '../../src/authserver/keys.js'
import type { StorageAdapter } from '../../src/authserver/storage/adapter.js'
import { createMemoryAdapter } from '../../src/authserver/storage/memory.js'
import { callApi, passwordGrant, passwordSetup } from '../support/authserver.js'
import { CLI, portcullis } from '../support/cli.js'
import { minimalConfig } from '../support/config.js'
import { startAuthServerGateway, type RunningGateway } from '../support/gateway.js'
import { deleteKeys, keysUnder } from '../support/redis.js'
import { closedPort } from '../support/upstream.js'

const REDIS_URL = process.env.REDIS_URL
const KEK_FROM_ENV = '${PORTCULLIS_KEK}'
const newKek = () => randomBytes(32).toString('base64')
const kekId = (text: string) => KeyEncryptionKey.parse(text).id
/** What a private JWK looks like in JSON text: its `d` member, or a whole `privateJwk`. */
const PRIVATE_IN_CLEAR = /"d"\s*:\s*"|"privateJwk"/

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build (npm test does it first)`)
})

interface Site {
  dir: string
  db: string
  port: number
  /** The `authorization_server` section: SQLite in `db`, with or without the KEK from $PORTCULLIS_KEK. */
  authorizationServer(withKek: boolean): Record<string, unknown>
  /** A config file for the CLI naming the same store and issuer, listening on ports of its own. */
  configFile(withKek: boolean): Promise<string>
}

async function sqliteSite(): Promise<Site> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-kek-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const db = path.join(dir, 'data', 'portcullis.db')
  const port = await closedPort()
  const authorizationServer = (withKek: boolean) => passwordSetup({
    store: { type: 'sqlite', path: db },
    signing: { algorithm: 'ES256', ...(withKek && { key_encryption_key: KEK_FROM_ENV }) },
  })
  return {
    dir, db, port, authorizationServer,
    configFile: async (withKek) => {
      const file = path.join(dir, `cli-${withKek ? 'kek' : 'clear'}.yaml`)
      writeFileSync(file, stringify({
        server: { listen: `127.0.0.1:${await closedPort()}` },
        admin: { listen: `127.0.0.1:${await closedPort()}` },
        log: { level: 'warn' },
        upstreams: { echo: { url: 'builtin:echo' } },
        routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
        authorization_server: { enabled: true, issuer: `http://127.0.0.1:${port}`, ...authorizationServer(withKek) },
      }))
      return file
    },
  }
}

async function startOn(site: Site, kek: string | undefined): Promise<RunningGateway> {
  const gateway = await startAuthServerGateway(site.authorizationServer(kek !== undefined), {},
    { port: site.port, env: kek === undefined ? {} : { PORTCULLIS_KEK: kek } })
  onTestFinished(() => gateway.close())
  return gateway
}

/** The SQLite file and its WAL as bytes: what a stolen disk or backup holds. */
function rawFiles(db: string): string {
  return [db, `${db}-wal`].filter((file) => existsSync(file)).map((file) => readFileSync(file).toString('latin1')).join('')
}

/** The stored `signing_key` values, read with SQLite itself (no gateway open). */
function storedKeys(db: string): Array<Record<string, unknown>> {
  const handle = new Database(db, { readonly: true })
  try {
    return (handle.prepare("SELECT value FROM artifacts WHERE kind = 'signing_key' ORDER BY id").all() as Array<{ value: string }>)
      .map((row) => JSON.parse(row.value) as Record<string, unknown>)
  } finally {
    handle.close()
  }
}

const sealedUnder = (keys: Array<Record<string, unknown>>) =>
  keys.map((key) => (key.encryptedPrivateJwk as { kekId?: string } | undefined)?.kekId ?? 'clear')

async function accessToken(gateway: RunningGateway): Promise<string> {
  const res = await passwordGrant(gateway, 'orders:read')
  expect(res.status, res.text).toBe(200)
  return res.body.access_token as string
}

const jwksOf = async (gateway: RunningGateway) => (await fetch(`${gateway.url}/jwks`)).json() as Promise<unknown>
const messages = (gateway: RunningGateway) => gateway.logs.map((line) => JSON.parse(line) as { level: number; msg: string })

describe('issue 16: private signing keys at rest (SQLite)', () => {
  it('with key_encryption_key, neither the SQLite file nor its WAL holds a private key member in clear; tokens outlive a restart', async () => {
    const site = await sqliteSite()
    const kek = newKek()
    const before = await startOn(site, kek)
    const token = await accessToken(before)
    expect(rawFiles(site.db)).not.toMatch(PRIVATE_IN_CLEAR)
    const jwks = await jwksOf(before)
    await before.close()
    await new Promise((resolve) => setTimeout(resolve, 200))

    expect(rawFiles(site.db)).not.toMatch(PRIVATE_IN_CLEAR)
    const keys = storedKeys(site.db)
    expect(keys.map((key) => key.alg).sort()).toEqual(['ES256', 'RS256'])
    expect(sealedUnder(keys)).toEqual([kekId(kek), kekId(kek)])

    const after = await startOn(site, kek)
    expect(await jwksOf(after)).toEqual(jwks)
    expect((await callApi(after, token)).status).toBe(200)
    expect((await callApi(after, await accessToken(after))).status).toBe(200)
  })

  it('a wrong or missing key_encryption_key: start exits 1 naming the key, and the SQLite file is byte-identical', async () => {
    const site = await sqliteSite()
    const kek = newKek()
    await (await startOn(site, kek)).close()
    const bytes = readFileSync(site.db)
    expect(existsSync(`${site.db}-wal`)).toBe(false)

    const wrong = await portcullis(['start', '--config', await site.configFile(true)], { env: { PORTCULLIS_KEK: newKek() } })
    expect(wrong.code).toBe(1)
    expect(wrong.stderr).toMatch(new RegExp(`^start: authorization_server\\.signing\\.key_encryption_key \\(key id [0-9a-f]{16}\\) is not the key ` +
      `2 signing keys in the store \\(.+\\) were encrypted with \\(key id ${kekId(kek)}\\).*nothing in the store was changed\\n$`))
    const missing = await portcullis(['start', '--config', await site.configFile(false)])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toMatch(/^start: 2 signing keys in the store \(.+\) are encrypted \(key id [0-9a-f]{16}\) and authorization_server\.signing\.key_encryption_key is not set/)
    // keys rotate, which writes new keys, refuses as well.
    const rotate = await portcullis(['keys', 'rotate', '--config', await site.configFile(true)], { env: { PORTCULLIS_KEK: newKek() } })
    expect(rotate.code).toBe(1)
    expect(rotate.stderr).toMatch(/^keys rotate: authorization_server\.signing\.key_encryption_key .*nothing in the store was changed\n$/)

    expect(readFileSync(site.db).equals(bytes)).toBe(true)
    expect(existsSync(`${site.db}-wal`)).toBe(false)
    // The right key still opens it.
    const gateway = await startOn(site, kek)
    expect((await callApi(gateway, await accessToken(gateway))).status).toBe(200)
  })

  it('a store in clear works without key_encryption_key, with a warning; setting the key encrypts it in place', async () => {
    const site = await sqliteSite()
    const clear = await startOn(site, undefined)
    expect(messages(clear)).toContainEqual(expect.objectContaining({ level: 40,
      msg: expect.stringMatching(/^authorization_server\.signing\.key_encryption_key is not set: the private signing keys are stored in clear in the SQLite file/) as unknown }))
    const token = await accessToken(clear)
    expect((await callApi(clear, token)).status).toBe(200)
    const jwks = await jwksOf(clear)
    await clear.close()
    expect(sealedUnder(storedKeys(site.db))).toEqual(['clear', 'clear'])

    const kek = newKek()
    const sealed = await startOn(site, kek)
    expect(messages(sealed)).toContainEqual(expect.objectContaining({ level: 30,
      msg: 'signing keys stored in clear are now encrypted with authorization_server.signing.key_encryption_key' }))
    expect(messages(sealed).filter((line) => line.msg.includes('key_encryption_key is not set'))).toEqual([])
    expect(await jwksOf(sealed)).toEqual(jwks)
    expect((await callApi(sealed, token)).status).toBe(200)
    await sealed.close()
    expect(sealedUnder(storedKeys(site.db))).toEqual([kekId(kek), kekId(kek)])
    expect(JSON.stringify(storedKeys(site.db))).not.toMatch(PRIVATE_IN_CLEAR)
  })

  it('keys rekey re-encrypts every key under the key read on stdin; tokens signed before still verify under the new key', async () => {
    const site = await sqliteSite()
    const [oldKek, newKey] = [newKek(), newKek()]
    const before = await startOn(site, oldKek)
    const token = await accessToken(before)
    const jwks = await jwksOf(before)
    await before.close()
    const kids = storedKeys(site.db).map((key) => key.kid as string).sort()

    const run = await portcullis(['keys', 'rekey', '--config', await site.configFile(true)], { env: { PORTCULLIS_KEK: oldKek }, stdin: `${newKey}\n` })
    expect(run.stderr).toBe('')
    expect(run.code).toBe(0)
    expect(run.stdout).toBe(`${kids.map((kid) => `rekeyed ${kid}\n`).join('')}every signing key is encrypted with key id ${kekId(newKey)}: ` +
      'set authorization_server.signing.key_encryption_key to the new key, then restart each gateway\n')
    expect(run.stdout + run.stderr).not.toContain(newKey)
    expect(sealedUnder(storedKeys(site.db))).toEqual([kekId(newKey), kekId(newKey)])
    expect(rawFiles(site.db)).not.toMatch(PRIVATE_IN_CLEAR)

    await expect(startOn(site, oldKek)).rejects.toThrow(/key_encryption_key \(key id [0-9a-f]+\) is not the key/)
    const after = await startOn(site, newKey)
    expect(await jwksOf(after)).toEqual(jwks)
    expect((await callApi(after, token)).status).toBe(200)
    expect((await callApi(after, await accessToken(after))).status).toBe(200)
  })

  it('a keys rekey stopped half-way is finished by running it again; a key that neither key opens stops it before any write', async () => {
    const site = await sqliteSite()
    const [oldKek, newKey] = [newKek(), newKek()]
    await (await startOn(site, oldKek)).close()
    const handle = new Database(site.db)
    const [first] = handle.prepare("SELECT id, value FROM artifacts WHERE kind = 'signing_key' ORDER BY id").all() as Array<{ id: string; value: string }>
    handle.close()
    const file = await site.configFile(true)
    expect((await portcullis(['keys', 'rekey', '--config', file], { env: { PORTCULLIS_KEK: oldKek }, stdin: newKey })).code).toBe(0)
    // As if the run had died before its second write: one key still under the old KEK.
    const rollBack = new Database(site.db)
    rollBack.prepare("UPDATE artifacts SET value = ? WHERE kind = 'signing_key' AND id = ?").run(first!.value, first!.id)
    rollBack.close()
    expect(new Set(sealedUnder(storedKeys(site.db)))).toEqual(new Set([kekId(oldKek), kekId(newKey)]))
    await expect(startOn(site, newKey)).rejects.toThrow(`the signing key in the store (${first!.id}) was encrypted with (key id ${kekId(oldKek)})`)

    const bytes = readFileSync(site.db)
    const stray = await portcullis(['keys', 'rekey', '--config', file], { env: { PORTCULLIS_KEK: newKek() }, stdin: newKek() })
    expect(stray.code).toBe(1)
    expect(stray.stderr).toMatch(/^keys rekey: 2 signing keys .* are encrypted with key id .*, which is neither authorization_server\.signing\.key_encryption_key .*nothing in the store was changed\n$/)
    expect(readFileSync(site.db).equals(bytes)).toBe(true)

    const again = await portcullis(['keys', 'rekey', '--config', file], { env: { PORTCULLIS_KEK: oldKek }, stdin: newKey })
    expect(again.code).toBe(0)
    expect(again.stdout).toContain(`rekeyed ${first!.id}\n`)
    expect(again.stdout).toMatch(/^unchanged \S+ \(already under the new key\)$/m)
    expect(sealedUnder(storedKeys(site.db))).toEqual([kekId(newKey), kekId(newKey)])
    const gateway = await startOn(site, newKey)
    expect((await callApi(gateway, await accessToken(gateway))).status).toBe(200)
  })

  it('keys rekey encrypts a store kept in clear, and refuses a missing or malformed new key without echoing it', async () => {
    const site = await sqliteSite()
    await (await startOn(site, undefined)).close()
    const file = await site.configFile(false)
    const empty = await portcullis(['keys', 'rekey', '--config', file], { stdin: '' })
    expect(empty).toMatchObject({ code: 1, stdout: '' })
    expect(empty.stderr).toMatch(/^keys rekey: no new key on standard input/)
    const short = 'c2hvcnQtYW5kLXNlY3JldA=='
    const malformed = await portcullis(['keys', 'rekey', '--config', file], { stdin: short })
    expect(malformed).toMatchObject({ code: 1, stdout: '' })
    expect(malformed.stderr).toBe('keys rekey: the new key on standard input must be 32 random bytes in base64 or base64url, such as the output of openssl rand -base64 32\n')
    expect(sealedUnder(storedKeys(site.db))).toEqual(['clear', 'clear'])

    const kek = newKek()
    const run = await portcullis(['keys', 'rekey', '--config', file], { stdin: kek })
    expect(run.code).toBe(0)
    expect(sealedUnder(storedKeys(site.db))).toEqual([kekId(kek), kekId(kek)])
    const gateway = await startOn(site, kek)
    expect((await callApi(gateway, await accessToken(gateway))).status).toBe(200)
  })
})

describe('portcullis check and key_encryption_key', () => {
  const config = (authorizationServer: string) => minimalConfig(`authorization_server:
  enabled: true
  issuer: "http://127.0.0.1:8080"
${authorizationServer}`)
  const check = (text: string, env: NodeJS.ProcessEnv = {}) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-kek-check-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, text)
    return { file, run: portcullis(['check', '--config', file], { env }) }
  }

  it('warns when a SQLite or Redis store keeps its keys in clear, not with a key or a memory store', async () => {
    const sqlite = check(config('  store:\n    type: sqlite\n'))
    expect((await sqlite.run).stdout).toBe(`${sqlite.file}: warning: authorization_server.signing.key_encryption_key is not set: the private signing keys ` +
      `are stored in clear in the SQLite file; whoever reads it, or a backup of it, can sign tokens\n${sqlite.file}: OK\n`)
    const redis = check(config('  store:\n    type: redis\n    url: "redis://127.0.0.1:6379"\n'))
    expect((await redis.run).stdout).toContain('stored in clear in Redis;')
    const memory = check(config('  store:\n    type: memory\n'))
    expect(await memory.run).toEqual({ code: 0, stdout: `${memory.file}: OK\n`, stderr: '' })
    const sealed = check(config(`  signing:\n    key_encryption_key: "${KEK_FROM_ENV}"\n`), { PORTCULLIS_KEK: newKek() })
    expect(await sealed.run).toEqual({ code: 0, stdout: `${sealed.file}: OK\n`, stderr: '' })
  })

  it('refuses a key that is not 32 bytes of base64, pointing at its line without echoing it, and an unset variable', async () => {
    const secret = randomBytes(16).toString('base64')
    const short = check(config(`  signing:\n    key_encryption_key: "${KEK_FROM_ENV}"\n`), { PORTCULLIS_KEK: secret })
    expect(await short.run).toEqual({ code: 1, stdout: '',
      stderr: `${short.file}:12:25  authorization_server.signing.key_encryption_key: must be 32 random bytes in base64 or base64url, such as the output of openssl rand -base64 32\n` })
    const unset = check(config(`  signing:\n    key_encryption_key: "${KEK_FROM_ENV}"\n`))
    expect((await unset.run).stderr).toBe(`${unset.file}:12:25  authorization_server.signing.key_encryption_key: \${PORTCULLIS_KEK} is not set\n`)
  })
})

describe('a running process and a rekey (KeyManager on one store)', () => {
  const options = (kek: string, log: KeyManagerOptions['log'] = { info: () => {}, warn: () => {} }): KeyManagerOptions => ({
    algorithm: 'ES256', publishDelayMs: 0, retireAfterSeconds: 3600, now: Date.now, log, reloadIntervalMs: 0,
    keyEncryption: KeyEncryptionKey.parse(kek),
  })
  async function open(store: StorageAdapter, kek: string, log?: KeyManagerOptions['log']): Promise<KeyManager> {
    const keys = await KeyManager.open(store, options(kek, log))
    onTestFinished(() => keys.close())
    return keys
  }
  const sign = async (keys: KeyManager) => {
    const { SignJWT } = await import('jose')
    const key = keys.current('ES256')
    return new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: key.kid }).setIssuedAt().setExpirationTime('1h').sign(key.privateKey)
  }

  it('keeps signing and verifying with the keys it loaded, publishes keys it cannot open, and writes over nothing', async () => {
    const store = createMemoryAdapter()
    onTestFinished(() => store.close())
    const [oldKek, newKey] = [newKek(), newKek()]
    const warnings: string[] = []
    const running = await open(store, oldKek, { info: () => {}, warn: (_fields: unknown, message?: string) => { warnings.push(message ?? '') } })
    const before = await sign(running)

    const { rekeySigningKeys } = await import('../../src/authserver/key-encryption.js')
    await rekeySigningKeys(store, KeyEncryptionKey.parse(oldKek), KeyEncryptionKey.parse(newKey))
    await running.reload()
    await jwtVerify(before, running.getKey)
    await jwtVerify(await sign(running), running.getKey)

    // A process started with the new key rotates: the old-key process publishes the new keys and verifies
    // what they sign, but cannot sign with them, so it keeps signing with its own until they retire.
    const restarted = await open(store, newKey)
    await jwtVerify(before, restarted.getKey)
    const { added } = await restarted.rotate()
    const stored = JSON.stringify(await store.list('signing_key'))
    await running.reload()
    expect(running.jwks().keys.map((key) => key.kid)).toEqual(expect.arrayContaining(added))
    expect(warnings.filter((message) => message.startsWith('a signing key in the store does not open'))).toHaveLength(2)
    await jwtVerify(await sign(restarted), running.getKey)
    expect(added).not.toContain(running.current('ES256').kid)
    await jwtVerify(await sign(running), restarted.getKey)
    await running.reload()
    expect(warnings.filter((message) => message.startsWith('a signing key in the store does not open'))).toHaveLength(2)
    expect(JSON.stringify(await store.list('signing_key'))).toBe(stored)
    // And a process starting with the old key now refuses.
    await expect(KeyManager.open(store, options(oldKek))).rejects.toThrow(/is not the key 4 signing keys in the store/)
    expect(JSON.stringify(await store.list('signing_key'))).toBe(stored)
  })
})

/** Every key under `prefix` with its whole content: what the Redis (and its AOF/RDB files) holds. */
async function redisContent(redis: Redis, prefix: string): Promise<string> {
  const entries: string[] = []
  for (const key of (await keysUnder(redis, prefix)).sort()) {
    const type = await redis.type(key)
    const content = type === 'hash' ? await redis.hgetall(key) : type === 'string' ? await redis.get(key)
      : type === 'set' ? (await redis.smembers(key)).sort() : type === 'zset' ? await redis.zrange(key, 0, -1, 'WITHSCORES') : type
    entries.push(`${key} ${type} ${JSON.stringify(content)}`)
  }
  return entries.join('\n')
}

describe.skipIf(REDIS_URL === undefined)(`issue 16: private signing keys at rest (Redis)${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  it('no private member in clear in Redis; a wrong key changes nothing; after keys rekey the running instance keeps working', async () => {
    const prefix = `{portcullis-test-${randomUUID()}}:`
    const redis = new Redis(REDIS_URL!, { maxRetriesPerRequest: 1 })
    onTestFinished(async () => {
      redis.disconnect()
      await deleteKeys(REDIS_URL!, prefix)
    })
    const port = await closedPort()
    const authorizationServer = (withKek: boolean) => passwordSetup({
      store: { type: 'redis', url: REDIS_URL, prefix },
      ...(withKek && { signing: { key_encryption_key: KEK_FROM_ENV } }),
    })
    const start = async (kek: string | undefined, instancePort = port) => {
      const gateway = await startAuthServerGateway(authorizationServer(kek !== undefined), {},
        { port: instancePort, env: kek === undefined ? {} : { PORTCULLIS_KEK: kek } })
      onTestFinished(() => gateway.close())
      return gateway
    }
    const [oldKek, newKey] = [newKek(), newKek()]
    const running = await start(oldKek)
    const token = await accessToken(running)
    const content = await redisContent(redis, prefix)
    expect(content).toContain('encryptedPrivateJwk')
    expect(content).not.toMatch(PRIVATE_IN_CLEAR)

    const otherPort = await closedPort()
    await expect(start(newKek(), otherPort)).rejects.toThrow(/^authorization_server\.signing\.key_encryption_key \(key id \w+\) is not the key/)
    await expect(start(undefined, otherPort)).rejects.toThrow(/are encrypted .* and authorization_server\.signing\.key_encryption_key is not set/)
    expect(await redisContent(redis, prefix)).toBe(content)

    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-kek-redis-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, stringify({
      upstreams: { echo: { url: 'builtin:echo' } },
      routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
      authorization_server: { enabled: true, issuer: running.issuer, ...authorizationServer(true) },
    }))
    const run = await portcullis(['keys', 'rekey', '--config', file], { env: { PORTCULLIS_KEK: oldKek }, stdin: newKey })
    expect(run.stderr).toBe('')
    expect(run.code).toBe(0)
    expect(run.stdout.match(/^rekeyed /gm)).toHaveLength(2)
    const rekeyed = await redisContent(redis, prefix)
    expect(rekeyed).not.toMatch(PRIVATE_IN_CLEAR)
    expect(rekeyed.match(/\\"kekId\\":\\"(\w+)\\"/g)).toEqual([`\\"kekId\\":\\"${kekId(newKey)}\\"`, `\\"kekId\\":\\"${kekId(newKey)}\\"`])

    // The running instance (old key) has not restarted: it reloads the re-sealed keys and goes on.
    await (running.app.authServer!.ctx.keys as KeyManager).reload()
    expect((await callApi(running, token)).status).toBe(200)
    expect((await callApi(running, await accessToken(running))).status).toBe(200)
    // Restarted with the new key, it serves the same keys, and the tokens it issued before.
    const jwks = await jwksOf(running)
    await running.close()
    await new Promise((resolve) => setTimeout(resolve, 200))
    const restarted = await start(newKey)
    expect(await jwksOf(restarted)).toEqual(jwks)
    expect((await callApi(restarted, token)).status).toBe(200)
    expect(await redisContent(redis, prefix)).not.toMatch(PRIVATE_IN_CLEAR)
  })
})
