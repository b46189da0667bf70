import { describe, expect, it } from 'vitest'
import type { AuthServerContext } from './context.js'
import {
  USER_CODE_ALPHABET, approveDeviceCode, createDeviceCode, denyDeviceCode, findDeviceCode, findUserCode, generateUserCode,
  normalizeUserCode,
} from './device.js'
import { createMemoryAdapter } from './storage/memory.js'

const USER_CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/

/** The parts of a context device.ts reads: a real memory store on a clock the test moves. */
function context() {
  let time = Date.now()
  const now = () => time
  const ctx = { store: createMemoryAdapter({ now }), now } as Partial<AuthServerContext> as AuthServerContext
  return { ctx, advance: (ms: number) => { time += ms } }
}

const ALICE = { sub: 'alice', authTime: 1_700_000_000 }

describe('generateUserCode (RFC 8628 §6.1)', () => {
  it('draws 8 base-20 characters shown as XXXX-XXXX', () => {
    for (let i = 0; i < 1000; i++) expect(generateUserCode()).toMatch(USER_CODE)
  })

  it('uses every character equally often: no modulo bias from 256 % 20', () => {
    // 800,000 characters: 40,000 expected each, σ ≈ 195. `byte % 20` without rejection would put 4 of the
    // characters 6% (2,500) below the rest; the bound of 2.5% (1,000, about 5σ) catches that.
    const counts = new Map<string, number>()
    for (let i = 0; i < 100_000; i++) {
      for (const char of generateUserCode().replace('-', '')) counts.set(char, (counts.get(char) ?? 0) + 1)
    }
    expect([...counts.keys()].sort().join('')).toBe(USER_CODE_ALPHABET)
    for (const count of counts.values()) expect(Math.abs(count - 40_000)).toBeLessThan(1000)
  })
})

describe('normalizeUserCode (RFC 8628 §6.1)', () => {
  it('ignores case, dashes, spaces and punctuation', () => {
    for (const input of ['WDJB-MJHT', 'wdjb-mjht', 'wdjb mjht', 'WDJBMJHT', ' wdjb–mjht ', 'W.D.J.B/M_J_H_T', 'wDjB\tmJhT\n']) {
      expect(normalizeUserCode(input), input).toBe('WDJB-MJHT')
    }
  })

  it('answers undefined for what cannot be a user code', () => {
    for (const input of ['', 'WDJB-MJH', 'WDJB-MJHTX', 'WDJA-MJHT', 'WDJB-MJH1', 'WDJB-MJHŤ', 'WDJB-MJHſ', 'WDJB-MJH\u212a', 'B'.repeat(65)]) {
      expect(normalizeUserCode(input), input).toBeUndefined()
    }
  })
})

describe('approveDeviceCode and denyDeviceCode', () => {
  it('an approval takes any spelling normalizeUserCode accepts, and the grant then sees approved with sub and auth_time', async () => {
    const { ctx } = context()
    const issued = await createDeviceCode(ctx, 'tv', ['orders:read'])
    expect(await findUserCode(ctx, issued.userCode.toLowerCase())).toEqual({ userCode: issued.userCode, clientId: 'tv', scope: ['orders:read'] })
    expect(await approveDeviceCode(ctx, ` ${issued.userCode.replace('-', ' ').toLowerCase()} `, ALICE)).toBe(true)
    expect(await findDeviceCode(ctx, issued.deviceCode)).toMatchObject({
      clientId: 'tv', scope: ['orders:read'], status: 'approved', sub: 'alice', authTime: ALICE.authTime, interval: 5, redeemed: false,
    })
  })

  it('a user code works once: after an approval or a denial, neither applies again', async () => {
    const { ctx } = context()
    const approved = await createDeviceCode(ctx, 'tv', [])
    expect(await approveDeviceCode(ctx, approved.userCode, ALICE)).toBe(true)
    expect(await approveDeviceCode(ctx, approved.userCode, { sub: 'mallory', authTime: 0 })).toBe(false)
    expect(await denyDeviceCode(ctx, approved.userCode)).toBe(false)
    expect((await findDeviceCode(ctx, approved.deviceCode))?.sub).toBe('alice')

    const denied = await createDeviceCode(ctx, 'tv', [])
    expect(await denyDeviceCode(ctx, denied.userCode)).toBe(true)
    expect(await approveDeviceCode(ctx, denied.userCode, ALICE)).toBe(false)
    expect(await findUserCode(ctx, denied.userCode)).toBeUndefined()
    expect((await findDeviceCode(ctx, denied.deviceCode))?.status).toBe('denied')
  })

  it('of an approval and a denial racing on one code, exactly one applies', async () => {
    const { ctx } = context()
    const issued = await createDeviceCode(ctx, 'tv', [])
    const results = await Promise.all([approveDeviceCode(ctx, issued.userCode, ALICE), denyDeviceCode(ctx, issued.userCode),
      approveDeviceCode(ctx, issued.userCode, ALICE), denyDeviceCode(ctx, issued.userCode)])
    expect(results.filter(Boolean)).toHaveLength(1)
  })

  it('an unknown, malformed or expired code applies nothing', async () => {
    const { ctx, advance } = context()
    const issued = await createDeviceCode(ctx, 'tv', [])
    expect(await approveDeviceCode(ctx, 'BBBB-BBBB', ALICE)).toBe(false)
    expect(await approveDeviceCode(ctx, 'not a code', ALICE)).toBe(false)
    advance(600_000)
    expect(await findUserCode(ctx, issued.userCode)).toBeUndefined()
    expect(await approveDeviceCode(ctx, issued.userCode, ALICE)).toBe(false)
    expect(await denyDeviceCode(ctx, issued.userCode)).toBe(false)
    // Still known to the grant, which must answer expired_token rather than invalid_grant (RFC 8628 §3.5).
    expect(await findDeviceCode(ctx, issued.deviceCode)).toMatchObject({ status: 'pending' })
  })

  it('keeps the device_code only as its hash', async () => {
    const { ctx } = context()
    const issued = await createDeviceCode(ctx, 'tv', [])
    expect(issued.deviceCode).toMatch(/^pdc_[A-Za-z0-9_-]{43}$/)
    expect(await ctx.store.find('device_code', issued.deviceCode)).toBeUndefined()
    const [row] = (await ctx.store.list('device_code')).map((record) => JSON.stringify(record))
    expect(row).not.toContain(issued.deviceCode)
    expect(row).not.toContain(issued.deviceCode.slice(4))
  })
})
