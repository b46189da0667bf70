import type { IncomingMessage } from 'node:http'
import { describe, expect, it } from 'vitest'
import { gcra, gcraParameters } from './gcra.js'
import { clientAddress } from './limiter.js'
import { MemoryBuckets } from './memory.js'

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
    const buckets = new MemoryBuckets(200)
    const parameters = gcraParameters(1, 1000, 1)
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
