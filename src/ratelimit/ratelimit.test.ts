import type { IncomingMessage } from 'node:http'
import { describe, expect, it } from 'vitest'
import { gcra, gcraAll, gcraParameters, type GcraParameters } from './gcra.js'
import { clientAddress } from './limiter.js'
import { MemoryBuckets, takeAll } from './memory.js'
import { SharedBucketsHost } from './shared.js'

const request = (remoteAddress: string, forwarded?: string) =>
  ({ socket: { remoteAddress }, headers: forwarded === undefined ? {} : { 'x-forwarded-for': forwarded } }) as unknown as IncomingMessage

describe('gcra', () => {
  it('admits burst at once at epoch-millisecond times (no float drift), then one per interval', () => {
    const parameters = gcraParameters(6, 1000, 6)
    let tat = 0
    const now = 1_764_000_000_123
    const admitted: boolean[] = []
    for (let i = 0; i < 7; i++) {
      const outcome = gcra(tat, now, parameters)
      admitted.push(outcome.allowed)
      if (outcome.allowed) tat = outcome.tat
    }
    expect(admitted).toEqual([true, true, true, true, true, true, false])
    const refused = gcra(tat, now, parameters)
    expect(refused.retryAfterMs).toBe(167)
    expect(gcra(tat, now + 167, parameters).allowed).toBe(true)
  })
})

describe('clientAddress', () => {
  it('counts an IPv6 client per /64 and an IPv4-mapped one as IPv4', () => {
    expect(clientAddress(request('2001:db8:1:2:aaaa:bbbb:cccc:dddd'), false)).toBe('2001:db8:1:2::/64')
    expect(clientAddress(request('2001:db8:1:2::7'), false)).toBe('2001:db8:1:2::/64')
    expect(clientAddress(request('2001:DB8:0001:0002::8'), false)).toBe('2001:db8:1:2::/64')
    expect(clientAddress(request('::ffff:192.0.2.7'), false)).toBe('192.0.2.7')
    expect(clientAddress(request('192.0.2.7'), false)).toBe('192.0.2.7')
  })

  it('reads X-Forwarded-For only behind a trusted balancer, and then only its last entry (the one the balancer wrote)', () => {
    expect(clientAddress(request('10.0.0.1', '198.51.100.1, 203.0.113.5'), false)).toBe('10.0.0.1')
    expect(clientAddress(request('10.0.0.1', '198.51.100.1, 203.0.113.5'), true)).toBe('203.0.113.5')
    expect(clientAddress(request('10.0.0.1', ''), true)).toBe('10.0.0.1')
  })
})

describe('MemoryBuckets', () => {
  it('stays within max_keys: refilled keys go first, then the oldest 1 %', () => {
    const memory = new MemoryBuckets(200)
    const parameters = gcraParameters(1, 1000, 1)
    const buckets = { take: (key: string, now: number, budget: GcraParameters) => takeAll([{ bucket: memory, key, parameters: budget }], now)[0]!, get size() { return memory.size } }
    for (let i = 0; i < 200; i++) buckets.take(`k${i}`, 0, parameters)
    expect(buckets.size).toBe(200)
    // All still draining at t=500: the oldest 1 % (2 keys) make room.
    buckets.take('new', 500, parameters)
    expect(buckets.size).toBe(199)
    expect(buckets.take('k0', 500, parameters).allowed).toBe(true)   // evicted: starts over
    expect(buckets.take('k150', 500, parameters).allowed).toBe(false) // kept: still limited
    // At t=2000 every bucket has refilled: they all go at the next insertion.
    buckets.take('later', 2000, parameters)
    expect(buckets.size).toBe(1)
  })
})

describe('all or nothing across a request\'s policies (gcraAll, takeAll)', () => {
  const roomy = gcraParameters(100, 10_000, 100)
  const tight = gcraParameters(2, 10_000, 2)

  it('a request refused by one policy spends nothing of the others', () => {
    const roomyBuckets = new MemoryBuckets(10)
    const tightBuckets = new MemoryBuckets(10)
    const now = 1_764_000_000_000
    const outcomes = []
    for (let i = 0; i < 10; i++) {
      outcomes.push(takeAll([{ bucket: roomyBuckets, key: 'c', parameters: roomy }, { bucket: tightBuckets, key: 'c', parameters: tight }], now))
    }
    expect(outcomes.map(([a, b]) => a!.allowed && b!.allowed)).toEqual([true, true, false, false, false, false, false, false, false, false])
    // Two admitted: the roomy policy spent 2 of 100, not 10 (it says 98 left, as if the refused requests never came).
    expect(outcomes.at(-1)![0]).toMatchObject({ allowed: true, remaining: 98 })
    expect(gcra(roomyBuckets.tatOf('c'), now, roomy).remaining).toBe(97)
    expect(outcomes.at(-1)![1]).toMatchObject({ allowed: false, remaining: 0 })
  })

  it('an unspent outcome says what is left without the request: one more remaining, the reset as it was', () => {
    const stored = gcra(0, 1000, roomy).tat
    const { admitted, outcomes } = gcraAll([stored, gcra(gcra(0, 1000, tight).tat, 1000, tight).tat], 1000, [roomy, tight])
    expect(admitted).toBe(false)
    expect(outcomes[0]).toEqual({ allowed: true, tat: stored, remaining: 99, retryAfterMs: 0, resetMs: 100 })
    expect(outcomes[1]!.allowed).toBe(false)
  })

  it('the primary\'s buckets under server.workers answer as the memory store does, one set per policy name and fingerprint', () => {
    let now = 5_000
    const host = new SharedBucketsHost(() => now)
    const take = (bucket: string) => host.takeAll([{ bucket, key: 'k', parameters: tight, maxKeys: 10 }])[0]!.allowed
    expect([take('p\nv1'), take('p\nv1'), take('p\nv1')]).toEqual([true, true, false])
    // A reload that changed the policy starts it afresh; the old set goes once idle for an hour.
    expect(take('p\nv2')).toBe(true)
    expect(host.size).toBe(2)
    now += 60 * 60 * 1000 + 1
    expect(take('q\nv1')).toBe(true)
    expect(host.size).toBe(1)
  })
})
