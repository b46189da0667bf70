/**
 * The contract every StorageAdapter passes (STYLE §6): `describeStorageContract('redis', createRedisAdapter)`.
 * The factory is called once per test and must return an empty store that reads the time from `now`
 * only: expiry is asserted by moving that clock, never by waiting.
 */
import { describe, expect, it, onTestFinished } from 'vitest'
import type { ArtifactKind, ArtifactRecord, StorageAdapter, StorageOptions } from '../../src/authserver/storage/adapter.js'

export type StorageFactory = (options: StorageOptions) => StorageAdapter | Promise<StorageAdapter>

const T0 = Date.UTC(2030, 0, 1)
const KINDS: readonly ArtifactKind[] = ['access_token', 'refresh_token', 'authorization_code', 'device_code', 'revoked_jti', 'signing_key', 'grant',
  'registered_client']

interface Opened {
  store: StorageAdapter
  /** Moves the injected clock forward (or back) by `ms`. */
  advance(ms: number): void
  time(): number
}

const byKindAndId = (a: ArtifactRecord, b: ArtifactRecord) => `${a.kind}/${a.id}`.localeCompare(`${b.kind}/${b.id}`)

/** `skipped`: why this adapter cannot run here (its server is missing); the suite is then reported skipped under that name. */
export function describeStorageContract(name: string, factory: StorageFactory, skipped?: string): void {
  async function open(): Promise<Opened> {
    let time = T0
    const store = await factory({ now: () => time })
    onTestFinished(() => store.close())
    return { store, advance: (ms) => { time += ms }, time: () => time }
  }

  describe.skipIf(skipped !== undefined)(`${name} storage adapter contract${skipped === undefined ? '' : ` (skipped: ${skipped})`}`, () => {
    describe('upsert and find', () => {
      it('returns the stored JSON value intact, unicode included', async () => {
        const { store } = await open()
        const value = {
          grantId: 'g-1', sub: 'ülrike 🦊 山田', scope: ['openid', 'orders:read'], nested: { n: 1.5, zero: 0, no: false, nil: null, deep: [[{ a: 'b' }]] },
          quotes: '"\'\\\n\t', nul: 'a\u0000b', astral: '𝄞', combining: 'e\u0301', rtl: 'مرحبا', empty: '',
        }
        await store.upsert('refresh_token', 'id-ü-🦊', value, 60)
        expect(await store.find('refresh_token', 'id-ü-🦊')).toStrictEqual(value)
      })

      it('returns undefined for an id never stored', async () => {
        const { store } = await open()
        expect(await store.find('access_token', 'nope')).toBeUndefined()
      })

      it('keeps the same id under different kinds apart', async () => {
        const { store } = await open()
        for (const kind of KINDS) await store.upsert(kind, 'same-id', { kind }, 60)
        for (const kind of KINDS) expect(await store.find(kind, 'same-id')).toStrictEqual({ kind })
      })

      it('stores a copy: changing the object afterwards, or what find returned, changes nothing stored', async () => {
        const { store } = await open()
        const value = { list: [1, 2] }
        await store.upsert('grant', 'g', value, 60)
        value.list.push(3)
        const found = await store.find('grant', 'g') as { list: number[] }
        found.list.push(4)
        expect(await store.find('grant', 'g')).toStrictEqual({ list: [1, 2] })
      })

      it('replaces the value, the expiry and the consumed mark on a second upsert', async () => {
        const { store, advance } = await open()
        await store.upsert('authorization_code', 'c', { v: 1 }, 10)
        expect(await store.consume('authorization_code', 'c')).toBe(true)
        await store.upsert('authorization_code', 'c', { v: 2 }, 100)
        advance(50_000)
        expect(await store.find('authorization_code', 'c')).toStrictEqual({ v: 2 })
        expect(await store.consume('authorization_code', 'c')).toBe(true)
      })

      it('replaces the indexed grantId and userCode with the value', async () => {
        const { store } = await open()
        await store.upsert('device_code', 'd', { grantId: 'old', userCode: 'OLD-CODE' }, 60)
        await store.upsert('device_code', 'd', { grantId: 'new', userCode: 'NEW-CODE' }, 60)
        expect(await store.findByUserCode('OLD-CODE')).toBeUndefined()
        expect(await store.findByUserCode('NEW-CODE')).toStrictEqual({ grantId: 'new', userCode: 'NEW-CODE' })
        expect(await store.revokeByGrantId('old')).toStrictEqual([])
        expect(await store.revokeByGrantId('new')).toHaveLength(1)
      })

      it('finds an artifact until its expiry and not from that instant on', async () => {
        const { store, advance } = await open()
        await store.upsert('access_token', 'a', { x: 1 }, 30)
        advance(29_999)
        expect(await store.find('access_token', 'a')).toStrictEqual({ x: 1 })
        advance(1)
        expect(await store.find('access_token', 'a')).toBeUndefined()
      })
    })

    describe('consume', () => {
      it('is true for the first call and false for every later one, and find shows when', async () => {
        const { store, advance, time } = await open()
        await store.upsert('authorization_code', 'c', { grantId: 'g' }, 60)
        advance(1_234)
        expect(await store.consume('authorization_code', 'c')).toBe(true)
        const consumedAt = time()
        advance(1_000)
        expect(await store.consume('authorization_code', 'c')).toBe(false)
        expect(await store.find('authorization_code', 'c')).toStrictEqual({ grantId: 'g', consumedAt })
        expect(await store.list('authorization_code')).toStrictEqual([
          { kind: 'authorization_code', id: 'c', value: { grantId: 'g', consumedAt }, expiresAt: T0 + 60_000 },
        ])
      })

      it('gives exactly one true to 10 parallel callers', async () => {
        const { store } = await open()
        await store.upsert('refresh_token', 'r', { grantId: 'g' }, 60)
        const results = await Promise.all(Array.from({ length: 10 }, () => store.consume('refresh_token', 'r')))
        expect(results.filter(Boolean)).toHaveLength(1)
      })

      it('is false for a missing, an expired or a destroyed artifact', async () => {
        const { store, advance } = await open()
        expect(await store.consume('authorization_code', 'missing')).toBe(false)
        await store.upsert('authorization_code', 'expiring', {}, 1)
        await store.upsert('authorization_code', 'destroyed', {}, 60)
        await store.destroy('authorization_code', 'destroyed')
        expect(await store.consume('authorization_code', 'destroyed')).toBe(false)
        advance(1_000)
        expect(await store.consume('authorization_code', 'expiring')).toBe(false)
      })

      it('marks only the artifact of that kind', async () => {
        const { store } = await open()
        await store.upsert('authorization_code', 'x', {}, 60)
        await store.upsert('device_code', 'x', {}, 60)
        expect(await store.consume('authorization_code', 'x')).toBe(true)
        expect(await store.find('device_code', 'x')).toStrictEqual({})
        expect(await store.consume('device_code', 'x')).toBe(true)
      })
    })

    describe('consumeAndWrite', () => {
      const successors = (n: number) => [
        { kind: 'refresh_token' as const, id: `next-${n}`, value: { grantId: 'g', n }, expiresInSeconds: 60 },
        { kind: 'access_token' as const, id: `at-${n}`, value: { grantId: 'g', n }, expiresInSeconds: 30 },
      ]

      it('consumes and writes in one step, for the first caller only; the writes join the grant', async () => {
        const { store, time } = await open()
        await store.upsert('refresh_token', 'r', { grantId: 'g' }, 60)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(1))).toBe(true)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(2))).toBe(false)
        expect(await store.find('refresh_token', 'r')).toStrictEqual({ grantId: 'g', consumedAt: time() })
        expect(await store.find('refresh_token', 'next-1')).toStrictEqual({ grantId: 'g', n: 1 })
        expect(await store.find('access_token', 'at-1')).toStrictEqual({ grantId: 'g', n: 1 })
        expect(await store.find('refresh_token', 'next-2')).toBeUndefined()
        expect(await store.list('access_token')).toStrictEqual([{ kind: 'access_token', id: 'at-1', value: { grantId: 'g', n: 1 }, expiresAt: T0 + 30_000 }])
        expect((await store.revokeByGrantId('g')).map((record) => `${record.kind}/${record.id}`).sort())
          .toStrictEqual(['access_token/at-1', 'refresh_token/next-1', 'refresh_token/r'])
      })

      it('lets exactly one of 10 parallel callers through, and stores only that one\'s writes', async () => {
        const { store } = await open()
        await store.upsert('refresh_token', 'r', { grantId: 'g' }, 60)
        const results = await Promise.all(Array.from({ length: 10 }, (_, n) => store.consumeAndWrite('refresh_token', 'r', successors(n))))
        expect(results.filter(Boolean)).toHaveLength(1)
        const winner = results.indexOf(true)
        for (let n = 0; n < 10; n++) expect(await store.find('refresh_token', `next-${n}`)).toStrictEqual(n === winner ? { grantId: 'g', n } : undefined)
      })

      it('changes nothing for a missing, expired or consumed artifact, or when what it requires is missing or expired', async () => {
        const { store, advance } = await open()
        expect(await store.consumeAndWrite('refresh_token', 'missing', successors(1))).toBe(false)
        await store.upsert('refresh_token', 'r', { grantId: 'g' }, 60)
        await store.upsert('grant', 'g', { sub: 'alice' }, 10)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(2), { kind: 'grant', id: 'other' })).toBe(false)
        advance(10_000)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(3), { kind: 'grant', id: 'g' })).toBe(false)
        expect(await store.find('refresh_token', 'r')).toStrictEqual({ grantId: 'g' })
        await store.upsert('grant', 'g', { sub: 'alice' }, 10)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(4), { kind: 'grant', id: 'g' })).toBe(true)
        advance(60_000)
        expect(await store.consumeAndWrite('refresh_token', 'r', successors(5))).toBe(false)
        for (const n of [1, 2, 3, 5]) expect(await store.find('refresh_token', `next-${n}`)).toBeUndefined()
      })

      it('may rewrite the artifact it consumes: the new value, unconsumed, with the new expiry, and never one destroyed first', async () => {
        const { store, advance } = await open()
        const used = (n: number) => [{ kind: 'registered_client' as const, id: 'dcr_1', value: { metadata: { n }, usedAt: n }, expiresInSeconds: 3_153_600_000 }]
        await store.upsert('registered_client', 'dcr_1', { metadata: { n: 0 } }, 60)
        expect(await store.consumeAndWrite('registered_client', 'dcr_1', used(1))).toBe(true)
        expect(await store.find('registered_client', 'dcr_1')).toStrictEqual({ metadata: { n: 1 }, usedAt: 1 })
        // Unconsumed: a second rewrite (another instance marking it used too) goes through as well.
        expect(await store.consumeAndWrite('registered_client', 'dcr_1', used(2))).toBe(true)
        advance(3600 * 24 * 365 * 1000)
        expect(await store.find('registered_client', 'dcr_1')).toStrictEqual({ metadata: { n: 2 }, usedAt: 2 })
        expect((await store.list('registered_client')).map((record) => record.id)).toStrictEqual(['dcr_1'])
        await store.destroy('registered_client', 'dcr_1')
        expect(await store.consumeAndWrite('registered_client', 'dcr_1', used(3))).toBe(false)
        expect(await store.find('registered_client', 'dcr_1')).toBeUndefined()
        await store.upsert('registered_client', 'dcr_2', { metadata: { n: 0 } }, 60)
        advance(60_000)
        expect(await store.consumeAndWrite('registered_client', 'dcr_2', used(4).map((write) => ({ ...write, id: 'dcr_2' })))).toBe(false)
        expect(await store.purgeExpired()).toBe(1)
        expect(await store.list('registered_client')).toStrictEqual([])
      })
    })

    describe('destroy', () => {
      it('removes the artifact of that kind only, and ignores a missing one', async () => {
        const { store } = await open()
        await store.upsert('signing_key', 'k', { alg: 'ES256' }, 60)
        await store.upsert('grant', 'k', { sub: 'u' }, 60)
        await store.destroy('signing_key', 'k')
        await store.destroy('signing_key', 'k')
        await store.destroy('access_token', 'never-stored')
        expect(await store.find('signing_key', 'k')).toBeUndefined()
        expect(await store.find('grant', 'k')).toStrictEqual({ sub: 'u' })
      })
    })

    describe('findByUserCode', () => {
      it('finds the unexpired device_code with that user code, consumed or not', async () => {
        const { store, time } = await open()
        await store.upsert('device_code', 'd', { userCode: 'WDJB-MJHT', clientId: 'tv' }, 60)
        expect(await store.findByUserCode('WDJB-MJHT')).toStrictEqual({ userCode: 'WDJB-MJHT', clientId: 'tv' })
        await store.consume('device_code', 'd')
        expect(await store.findByUserCode('WDJB-MJHT')).toStrictEqual({ userCode: 'WDJB-MJHT', clientId: 'tv', consumedAt: time() })
      })

      it('ignores other kinds carrying the same user code, and unknown codes', async () => {
        const { store } = await open()
        await store.upsert('authorization_code', 'a', { userCode: 'ABCD-EFGH' }, 60)
        await store.upsert('grant', 'g', { userCode: 'ABCD-EFGH' }, 60)
        expect(await store.findByUserCode('ABCD-EFGH')).toBeUndefined()
        expect(await store.findByUserCode('ZZZZ-ZZZZ')).toBeUndefined()
      })

      it('does not find an expired device_code', async () => {
        const { store, advance } = await open()
        await store.upsert('device_code', 'd', { userCode: 'WDJB-MJHT' }, 10)
        advance(10_000)
        expect(await store.findByUserCode('WDJB-MJHT')).toBeUndefined()
      })
    })

    describe('revokeByGrantId', () => {
      it('deletes every artifact of the grant, of every kind, and the grant itself, and returns them', async () => {
        const { store } = await open()
        const mine = (['access_token', 'refresh_token', 'authorization_code', 'device_code'] as const)
          .map((kind, index) => ({ kind, id: `${kind}-1`, value: { grantId: 'g-1', n: index }, expiresAt: T0 + (index + 1) * 1000 }))
        for (const { kind, id, value, expiresAt } of mine) await store.upsert(kind, id, value, (expiresAt - T0) / 1000)
        await store.upsert('grant', 'g-1', { sub: 'alice', clientId: 'app' }, 3600)
        await store.upsert('refresh_token', 'other', { grantId: 'g-2' }, 60)
        await store.upsert('grant', 'g-2', { sub: 'bob' }, 60)
        await store.consume('refresh_token', 'refresh_token-1')

        const deleted = await store.revokeByGrantId('g-1')

        const expected: ArtifactRecord[] = [
          ...mine.map((record) => record.kind === 'refresh_token' ? { ...record, value: { ...record.value, consumedAt: T0 } } : record),
          { kind: 'grant', id: 'g-1', value: { sub: 'alice', clientId: 'app' }, expiresAt: T0 + 3_600_000 },
        ]
        expect(deleted.sort(byKindAndId)).toStrictEqual(expected.sort(byKindAndId))
        for (const { kind, id } of expected) expect(await store.find(kind, id)).toBeUndefined()
        expect(await store.find('refresh_token', 'other')).toStrictEqual({ grantId: 'g-2' })
        expect(await store.find('grant', 'g-2')).toStrictEqual({ sub: 'bob' })
        expect(await store.revokeByGrantId('g-1')).toStrictEqual([])
      })

      it('returns nothing for an unknown grant', async () => {
        const { store } = await open()
        await store.upsert('access_token', 'a', { grantId: 'g' }, 60)
        expect(await store.revokeByGrantId('unknown')).toStrictEqual([])
        expect(await store.find('access_token', 'a')).toStrictEqual({ grantId: 'g' })
      })
    })

    describe('list', () => {
      it('returns every unexpired artifact of that kind only', async () => {
        const { store, advance } = await open()
        await store.upsert('signing_key', 'k1', { kid: 'k1' }, 100)
        await store.upsert('signing_key', 'k2', { kid: 'k2', grantId: 'x' }, 200)
        await store.upsert('signing_key', 'old', { kid: 'old' }, 10)
        await store.upsert('revoked_jti', 'k1', { kid: 'not a key' }, 100)
        advance(10_000)
        const listed = await store.list('signing_key')
        expect(listed.sort(byKindAndId)).toStrictEqual([
          { kind: 'signing_key', id: 'k1', value: { kid: 'k1' }, expiresAt: T0 + 100_000 },
          { kind: 'signing_key', id: 'k2', value: { kid: 'k2', grantId: 'x' }, expiresAt: T0 + 200_000 },
        ])
        expect(await store.list('authorization_code')).toStrictEqual([])
      })
    })

    describe('purgeExpired', () => {
      it('deletes only the expired artifacts and says how many', async () => {
        const { store, advance } = await open()
        await store.upsert('access_token', 'short', {}, 10)
        await store.upsert('refresh_token', 'short', { grantId: 'g' }, 20)
        await store.upsert('device_code', 'short', { userCode: 'AAAA-BBBB' }, 20)
        await store.upsert('access_token', 'long', {}, 60)
        advance(20_000)
        expect(await store.purgeExpired()).toBe(3)
        expect(await store.purgeExpired()).toBe(0)
        expect(await store.find('access_token', 'long')).toStrictEqual({})
        // Back in time, a row that was only hidden would be found again; a purged one is gone.
        advance(-20_000)
        expect(await store.find('access_token', 'short')).toBeUndefined()
        expect(await store.find('refresh_token', 'short')).toBeUndefined()
        expect(await store.findByUserCode('AAAA-BBBB')).toBeUndefined()
        expect(await store.revokeByGrantId('g')).toStrictEqual([])
      })
    })

    // Optional (adapter.ts): the shared store has it; stores one process uses leave it out, reported as skipped here.
    const shared = name.startsWith('redis')
    const skipped = shared ? '' : ` (skipped: the ${name} adapter is used by one process and has no firstUse)`
    describe(shared ? 'firstUse' : `firstUse${skipped}`, () => {
      it(`is true for the first of 10 parallel callers only, and false on every later call${skipped}`, async (context) => {
        const { store } = await open()
        if (store.firstUse === undefined) return context.skip(`the ${name} adapter has no firstUse`)
        const results = await Promise.all(Array.from({ length: 10 }, () => store.firstUse!('dpop:proof-1', 60)))
        expect(results.filter(Boolean)).toHaveLength(1)
        expect(await store.firstUse('dpop:proof-1', 60)).toBe(false)
        expect(await store.firstUse('dpop:proof-2', 60)).toBe(true)
      })

      it(`keeps its ids apart from every artifact${skipped}`, async (context) => {
        const { store } = await open()
        if (store.firstUse === undefined) return context.skip(`the ${name} adapter has no firstUse`)
        await store.upsert('access_token', 'same-id', { a: 1 }, 60)
        expect(await store.firstUse('same-id', 60)).toBe(true)
        expect(await store.find('access_token', 'same-id')).toStrictEqual({ a: 1 })
        expect((await store.list('access_token')).map((record) => record.id)).toStrictEqual(['same-id'])
        for (const kind of KINDS.filter((kind) => kind !== 'access_token')) expect(await store.list(kind)).toStrictEqual([])
        expect(await store.purgeExpired()).toBe(0)
        expect(await store.firstUse('same-id', 60)).toBe(false)
      })
    })

    describe('ping and close', () => {
      it('pings while open, and a second close is harmless', async () => {
        const { store } = await open()
        await expect(store.ping()).resolves.toBeUndefined()
        await store.close()
        await expect(store.close()).resolves.toBeUndefined()
      })
    })
  })
}
