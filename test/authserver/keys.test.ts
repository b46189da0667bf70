/**
 * The embedded server's signing keys (checklist §8, JW-02..JW-06): KeyManager against real stores (memory,
 * and SQLite in a temp dir), time from an injected clock; `portcullis keys rotate` as users run it.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { calculateJwkThumbprint, errors, jwtVerify, SignJWT, type JWK } from 'jose'
import { beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest'
import type { SigningAlgorithm } from '../../src/authserver/context.js'
import { KeyManager, keyRetirementSeconds, type KeyManagerOptions } from '../../src/authserver/keys.js'
import type { StorageAdapter } from '../../src/authserver/storage/adapter.js'
import { createMemoryAdapter } from '../../src/authserver/storage/memory.js'
import { createSqliteAdapter } from '../../src/authserver/storage/sqlite.js'
import { CLI, portcullis } from '../support/cli.js'
import { minimalConfig } from '../support/config.js'

const T0 = Date.UTC(2030, 0, 1)
const MINUTE = 60_000
const PUBLISH_DELAY_MS = 5 * MINUTE
const RETIRE_AFTER_SECONDS = 3600
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k']

interface Clock {
  now: () => number
  set(ms: number): void
  advance(ms: number): void
}

function clock(start = T0): Clock {
  let time = start
  return { now: () => time, set: (ms) => { time = ms }, advance: (ms) => { time += ms } }
}

function recordingLog() {
  const warnings: string[] = []
  return { warnings, log: { info: () => {}, warn: (_fields: unknown, message?: string) => { warnings.push(message ?? '') } } }
}

function memoryStore(time: Clock): StorageAdapter {
  const store = createMemoryAdapter({ now: time.now })
  onTestFinished(() => store.close())
  return store
}

async function openKeys(store: StorageAdapter, time: Clock, options: Partial<KeyManagerOptions> = {}): Promise<KeyManager> {
  const keys = await KeyManager.open(store, {
    algorithm: 'ES256',
    publishDelayMs: PUBLISH_DELAY_MS,
    retireAfterSeconds: RETIRE_AFTER_SECONDS,
    now: time.now,
    log: recordingLog().log,
    reloadIntervalMs: 0,
    ...options,
  })
  onTestFinished(() => keys.close())
  return keys
}

/** A token signed the way the token service signs: the current key of `alg`, its kid in the header. */
async function sign(keys: KeyManager, time: Clock, alg: SigningAlgorithm = 'ES256', ttlSeconds = 3600): Promise<string> {
  const key = keys.current(alg)
  const iat = Math.floor(time.now() / 1000)
  return new SignJWT({ client_id: 'svc' })
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'at+jwt' })
    .setIssuedAt(iat).setExpirationTime(iat + ttlSeconds).setSubject('svc')
    .sign(key.privateKey)
}

const verify = (keys: KeyManager, time: Clock, token: string) => jwtVerify(token, keys.getKey, { currentDate: new Date(time.now()) })
const kidsOf = (keys: KeyManager) => keys.jwks().keys.map((key) => key.kid).sort()
const storedKids = async (store: StorageAdapter) => (await store.list('signing_key')).map((record) => record.id).sort()

describe('JW-02/JW-03 generated keys', () => {
  it('JW-03 first start generates an ES256 key and an RS256 key, each with kty, a unique kid, use sig, alg and crv', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    const jwks = keys.jwks().keys
    expect(jwks.map((key) => key.alg).sort()).toEqual(['ES256', 'RS256'])
    for (const key of jwks) {
      expect(key.use).toBe('sig')
      expect(typeof key.kid).toBe('string')
      expect(key.kty).toBe(key.alg === 'ES256' ? 'EC' : 'RSA')
    }
    expect(jwks.find((key) => key.alg === 'ES256')!.crv).toBe('P-256')
    expect(new Set(jwks.map((key) => key.kid)).size).toBe(jwks.length)
  })

  it('JW-03 with EdDSA configured the keys are an Ed25519 key and an RS256 key', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time, { algorithm: 'EdDSA' })
    const byAlg = Object.fromEntries(keys.jwks().keys.map((key) => [key.alg, key]))
    expect(Object.keys(byAlg).sort()).toEqual(['EdDSA', 'RS256'])
    expect(byAlg.EdDSA).toMatchObject({ kty: 'OKP', crv: 'Ed25519', use: 'sig' })
    await expect(verify(keys, time, await sign(keys, time, 'EdDSA'))).resolves.toBeTruthy()
  })

  it('JW-03 with RS256 configured one RS256 key serves both purposes', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time, { algorithm: 'RS256' })
    expect(keys.jwks().keys.map((key) => key.alg)).toEqual(['RS256'])
  })

  it('JW-03 the RS256 key is always present and its modulus has at least 2048 bits', async () => {
    for (const algorithm of ['ES256', 'EdDSA', 'RS256'] as const) {
      const time = clock()
      const keys = await openKeys(memoryStore(time), time, { algorithm })
      const rsa = keys.jwks().keys.filter((key) => key.kty === 'RSA')
      expect(rsa).toHaveLength(1)
      expect(Buffer.from(rsa[0]!.n!, 'base64url').length * 8).toBeGreaterThanOrEqual(2048)
    }
  })

  it('JW-02 the JWKS carries public members only, never a private or symmetric member', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    for (const key of keys.jwks().keys) {
      for (const member of PRIVATE_MEMBERS) expect(key).not.toHaveProperty(member)
      expect(key.kty).not.toBe('oct')
    }
  })

  it('JW-02 a symmetric or malformed key put in the store is never published nor used', async () => {
    const time = clock()
    const store = memoryStore(time)
    const { log, warnings } = recordingLog()
    const keys = await openKeys(store, time, { log })
    await store.upsert('signing_key', 'hs', {
      kid: 'hs', alg: 'HS256', generation: 9, createdAt: T0, writeOrder: '1', activatesAt: T0,
      publicJwk: { kty: 'oct', k: 'c2VjcmV0' }, privateJwk: { kty: 'oct', k: 'c2VjcmV0' },
    }, 3600)
    await store.upsert('signing_key', 'bad', { kid: 'bad', alg: 'ES256' }, 3600)
    const before = keys.current('ES256').kid
    await keys.reload()
    expect(kidsOf(keys)).not.toContain('hs')
    expect(kidsOf(keys)).not.toContain('bad')
    expect(keys.current('ES256').kid).toBe(before)
    expect(warnings).toContain('ignoring an unusable signing key in the store')
  })

  it('each kid is the RFC 7638 SHA-256 thumbprint of its public key', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    for (const key of keys.jwks().keys) expect(await calculateJwkThumbprint(key as JWK, 'sha256')).toBe(key.kid)
  })

  it('private keys are imported once, and the same KeyObject signs after a reload', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    const first = keys.current('ES256').privateKey
    expect([first.type, first.asymmetricKeyType]).toEqual(['private', 'ec'])
    expect(keys.current('ES256').privateKey).toBe(first)
    await keys.reload()
    expect(keys.current('ES256').privateKey).toBe(first)
  })
})

describe('JW-04/JW-06 getKey', () => {
  it('JW-04 a token signed with current(alg) has a kid selecting exactly one JWKS key and verifies', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    for (const alg of ['ES256', 'RS256'] as const) {
      const token = await sign(keys, time, alg)
      const header = JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()) as { kid: string; alg: string }
      expect(keys.jwks().keys.filter((key) => key.kid === header.kid && key.alg === header.alg)).toHaveLength(1)
      await expect(verify(keys, time, token)).resolves.toMatchObject({ protectedHeader: { kid: header.kid } })
    }
  })

  it('JW-06 getKey refuses a token without a kid, with an unknown kid, with another alg than its key, or HS256', async () => {
    const time = clock()
    const keys = await openKeys(memoryStore(time), time)
    const key = keys.current('ES256')
    const claims = new SignJWT({}).setIssuedAt(T0 / 1000).setExpirationTime(T0 / 1000 + 60)
    const noKid = await new SignJWT({}).setProtectedHeader({ alg: 'ES256' }).setExpirationTime(T0 / 1000 + 60).sign(key.privateKey)
    await expect(verify(keys, time, noKid)).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    const unknown = await new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: 'nope' }).setExpirationTime(T0 / 1000 + 60).sign(key.privateKey)
    await expect(verify(keys, time, unknown)).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    const rsaKid = keys.current('RS256').kid
    const crossed = await new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: rsaKid }).setExpirationTime(T0 / 1000 + 60).sign(key.privateKey)
    await expect(verify(keys, time, crossed)).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    const hmac = await claims.setProtectedHeader({ alg: 'HS256', kid: key.kid }).sign(new TextEncoder().encode('x'.repeat(32)))
    await expect(verify(keys, time, hmac)).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
  })

  it('an unknown kid makes getKey re-read the store once, so a key another process activated verifies at once', async () => {
    const time = clock()
    const store = memoryStore(time)
    const gateway = await openKeys(store, time)
    const other = await openKeys(store, time)
    await other.rotate()
    time.advance(PUBLISH_DELAY_MS)
    const token = await sign(other, time)
    expect(kidsOf(gateway)).not.toContain(other.current('ES256').kid)
    await expect(verify(gateway, time, token)).resolves.toBeTruthy()
  })
})

describe('keys kept in the store', () => {
  it('keys survive re-opening the same store: same kids, and tokens signed before still verify', async () => {
    const time = clock()
    const store = memoryStore(time)
    const first = await openKeys(store, time)
    const token = await sign(first, time)
    first.close()
    const second = await openKeys(store, time)
    expect(kidsOf(second)).toEqual(kidsOf(first))
    expect(second.current('ES256').kid).toBe(first.current('ES256').kid)
    await expect(verify(second, time, token)).resolves.toBeTruthy()
  })

  it('keys survive closing and re-opening the SQLite file', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-keys-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'portcullis.db')
    const time = clock()
    const before = createSqliteAdapter(file, { now: time.now, purgeIntervalMs: 0 })
    const first = await openKeys(before, time)
    const token = await sign(first, time, 'RS256')
    first.close()
    await before.close()
    const after = createSqliteAdapter(file, { now: time.now, purgeIntervalMs: 0 })
    onTestFinished(() => after.close())
    const second = await openKeys(after, time)
    expect(kidsOf(second)).toEqual(kidsOf(first))
    await expect(verify(second, time, token)).resolves.toBeTruthy()
  })

  it('instances opening the same empty store concurrently agree on one key per algorithm', async () => {
    // A frozen clock makes every write time equal: the tie-break must still follow the order of writes.
    const realTime: Clock = { now: () => Date.now(), set: () => {}, advance: () => {} }
    for (const time of [clock(), realTime]) {
      const store = memoryStore(time)
      const instances = await Promise.all(Array.from({ length: 4 }, () => openKeys(store, time)))
      for (const alg of ['ES256', 'RS256'] as const) {
        expect(new Set(instances.map((keys) => keys.current(alg).kid)).size).toBe(1)
      }
      expect(new Set(instances.map((keys) => JSON.stringify(keys.jwks())))).toHaveProperty('size', 1)
      expect(await storedKids(store)).toEqual(kidsOf(instances[0]!))
      expect(await storedKids(store)).toHaveLength(2)
    }
  })

  it('processes opening the same empty SQLite file concurrently agree on one key per algorithm', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-keys-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'portcullis.db')
    const time = clock()
    const stores = Array.from({ length: 3 }, () => createSqliteAdapter(file, { now: time.now, purgeIntervalMs: 0 }))
    onTestFinished(async () => { await Promise.all(stores.map((store) => store.close())) })
    const instances = await Promise.all(stores.map((store) => openKeys(store, time)))
    for (const alg of ['ES256', 'RS256'] as const) {
      expect(new Set(instances.map((keys) => keys.current(alg).kid)).size).toBe(1)
    }
    expect(await storedKids(stores[0]!)).toEqual(kidsOf(instances[0]!))
  })

  it('a store emptied under a running process does not take its keys away', async () => {
    const time = clock()
    const store = memoryStore(time)
    const { log, warnings } = recordingLog()
    const keys = await openKeys(store, time, { log })
    const kid = keys.current('ES256').kid
    for (const stored of await storedKids(store)) await store.destroy('signing_key', stored)
    await keys.reload()
    expect(keys.current('ES256').kid).toBe(kid)
    expect(warnings).toContain('the store holds no active signing key for these algorithms; keeping the loaded keys')
  })
})

describe('JW-05 rotation', () => {
  it('JW-05 rotation publishes the new key first, signs with it after the publish delay, retires the old one after its tokens expired', async () => {
    const time = clock()
    const store = memoryStore(time)
    const keys = await openKeys(store, time)
    const old = { es: keys.current('ES256').kid, rs: keys.current('RS256').kid }
    const t1 = await sign(keys, time)

    const rotation = await keys.rotate()
    expect(rotation.retiring.sort()).toEqual([old.es, old.rs].sort())
    expect(rotation.added).toHaveLength(2)
    expect(rotation.activatesAt).toBe(T0 + PUBLISH_DELAY_MS)
    expect(rotation.retiresAt).toBe(rotation.activatesAt + RETIRE_AFTER_SECONDS * 1000)
    // (1) published at once, both generations side by side; the old key still signs.
    expect(kidsOf(keys)).toEqual([...rotation.added, old.es, old.rs].sort())
    expect(keys.current('ES256').kid).toBe(old.es)
    time.set(rotation.activatesAt - 1)
    expect(keys.current('ES256').kid).toBe(old.es)
    expect(keys.current('RS256').kid).toBe(old.rs)
    // The last token the old key signs expires before the old key leaves the JWKS.
    const lastOld = await sign(keys, time)
    const { payload } = await verify(keys, time, lastOld)
    expect(payload.exp! * 1000).toBeLessThanOrEqual(rotation.retiresAt)

    // (2) after the publish delay the new keys sign; tokens of both generations verify.
    time.set(rotation.activatesAt)
    const es = keys.current('ES256').kid
    expect(rotation.added).toContain(es)
    expect(rotation.added).toContain(keys.current('RS256').kid)
    const t2 = await sign(keys, time)
    await expect(verify(keys, time, t1)).resolves.toBeTruthy()
    await expect(verify(keys, time, t2)).resolves.toMatchObject({ protectedHeader: { kid: es } })

    // (3) the old keys stay published until every token they signed has expired, then leave JWKS and store.
    time.set(payload.exp! * 1000 - 1)
    await expect(verify(keys, time, lastOld)).resolves.toBeTruthy()
    time.set(rotation.retiresAt - 1)
    expect(kidsOf(keys)).toContain(old.es)
    time.set(rotation.retiresAt)
    expect(kidsOf(keys)).toEqual([...rotation.added].sort())
    await expect(jwtVerify(t1, keys.getKey, { currentDate: new Date(T0) })).rejects.toBeInstanceOf(errors.JWKSNoMatchingKey)
    await keys.reload()
    expect(await storedKids(store)).toEqual([...rotation.added].sort())
    expect(await store.find('signing_key', old.es)).toBeUndefined()
    await expect(verify(keys, time, await sign(keys, time))).resolves.toMatchObject({ protectedHeader: { kid: es } })
  })

  it('JW-05 a second rotation before the first completes keeps the first retirement date and retires the pending key', async () => {
    const time = clock()
    const store = memoryStore(time)
    const keys = await openKeys(store, time, { algorithm: 'RS256' })
    const [original] = kidsOf(keys)
    const first = await keys.rotate()
    time.advance(MINUTE)
    const second = await keys.rotate()
    expect(second.retiring).toEqual(first.added)
    const stored = async (kid: string) => ((await store.find('signing_key', kid)) as { retiresAt?: number }).retiresAt
    expect(await stored(original!)).toBe(first.retiresAt)
    expect(await stored(first.added[0]!)).toBe(second.retiresAt)
    time.set(second.activatesAt)
    expect(keys.current('RS256').kid).toBe(second.added[0])
    time.set(first.activatesAt)
    expect(keys.current('RS256').kid).toBe(first.added[0])
  })

  it('a rotation by another process (the CLI) is picked up by the reload timer; close() stops it', async () => {
    const time = clock()
    const store = memoryStore(time)
    const running = await openKeys(store, time, { reloadIntervalMs: 20 })
    const cli = await openKeys(store, time)
    const { added } = await cli.rotate()
    await vi.waitFor(() => expect(kidsOf(running)).toEqual(expect.arrayContaining(added)), { timeout: 2000, interval: 10 })
    running.close()
    const again = await cli.rotate()
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(kidsOf(running)).not.toContain(again.added[0])
  })

  it('keyRetirementSeconds keeps a replaced key published longer than an access token lives', () => {
    expect(keyRetirementSeconds({ accessTokenTtlSeconds: 3600 })).toBeGreaterThan(3600)
  })
})

describe('portcullis keys rotate', () => {
  beforeAll(() => {
    if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build (npm test does it first)`)
  })

  function configFile(authorizationServer: string): { file: string; dir: string } {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-rotate-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, minimalConfig(`authorization_server:
${authorizationServer}
`))
    return { file, dir }
  }

  const ENABLED = `  enabled: true
  issuer: "https://as.example.com"
  store:
    type: sqlite
    path: "./data/portcullis.db"
  clients:
    - client_id: "svc"
      client_secret: "0123456789abcdef0123"
      grant_types: [client_credentials]
      scopes: ["orders:read"]`

  it('JW-05 publishes a new key per algorithm in the store the gateway uses, which a running gateway picks up', async () => {
    const { file, dir } = configFile(ENABLED)
    const store = createSqliteAdapter(path.join(dir, 'data', 'portcullis.db'), { purgeIntervalMs: 0 })
    onTestFinished(() => store.close())
    const running = await KeyManager.open(store, {
      algorithm: 'ES256', publishDelayMs: PUBLISH_DELAY_MS, retireAfterSeconds: 3600, now: Date.now, log: recordingLog().log, reloadIntervalMs: 0,
    })
    onTestFinished(() => running.close())
    const old = kidsOf(running)

    const run = await portcullis(['keys', 'rotate', '--config', file])
    expect(run.stderr).toBe('')
    expect(run.code).toBe(0)
    const added = [...run.stdout.matchAll(/^added (\S+)$/gm)].map((match) => match[1]!)
    const retiring = [...run.stdout.matchAll(/^retiring (\S+)$/gm)].map((match) => match[1]!)
    expect(added).toHaveLength(2)
    expect(retiring.sort()).toEqual(old)
    await running.reload()
    expect(kidsOf(running)).toEqual([...old, ...added].sort())
    expect(added).not.toContain(running.current('ES256').kid)
  })

  it('exits 1 with a message when the authorization server is disabled or its store is missing', async () => {
    const disabled = await portcullis(['keys', 'rotate', '--config', configFile('  enabled: false').file])
    expect(disabled.code).toBe(1)
    expect(disabled.stderr).toMatch(/not enabled/)
    const missing = await portcullis(['keys', 'rotate', '--config', configFile(ENABLED).file])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toMatch(/no store at .*portcullis\.db/)
  })

  it('exits 1 when the store cannot be read', async () => {
    const { file, dir } = configFile(ENABLED)
    const db = path.join(dir, 'data', 'portcullis.db')
    rmSync(path.dirname(db), { recursive: true, force: true })
    mkdirSync(path.dirname(db))
    writeFileSync(db, 'this is not a SQLite database, but it is long enough to have a header '.repeat(20))
    const run = await portcullis(['keys', 'rotate', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(/^keys rotate: cannot open the store at /)
  })
})
