import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { RateLimiterMemory } from 'rate-limiter-flexible'
import { TooManyAttempts } from '../errors/oauth-errors.js'
import type { Attempt, Throttle } from './context.js'
import { resolveSettings } from './settings.js'
import { IN_FLIGHT_WAIT_MS, createThrottle, verifyThrottled, type LimiterOptions, type ThrottleEngaged } from './throttle.js'

function settings(throttling: { failures_per_client?: number; failures_per_ip?: number; window?: string }) {
  return resolveSettings({ enabled: true, issuer: 'https://as.example', throttling })
}

async function refusal(promise: Promise<unknown>): Promise<TooManyAttempts> {
  try {
    await promise
  } catch (error) {
    expect(error).toBeInstanceOf(TooManyAttempts)
    return error as TooManyAttempts
  }
  throw new Error('expected TooManyAttempts')
}

/** One attempt on `keys` that fails. */
async function fail(throttle: Throttle, keys: string[]): Promise<void> {
  (await throttle.reserve(keys)).keep()
}

/** One attempt on `keys` that succeeds. */
async function succeed(throttle: Throttle, keys: string[]): Promise<void> {
  await (await throttle.reserve(keys)).release()
}

describe('createThrottle', () => {
  beforeEach(() => { vi.useFakeTimers({ now: new Date('2026-01-01T00:00:00Z') }) })
  afterEach(() => { vi.useRealTimers() })

  it('lets a client key fail failures_per_client times, then refuses it with 429 and Retry-After', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 3, window: '1m' }))
    for (let failure = 0; failure < 3; failure++) await fail(throttle, ['client:a'])
    const error = await refusal(throttle.reserve(['client:a']))
    expect(error.status).toBe(429)
    expect(error.code).toBe('temporarily_unavailable')
    expect(error.retryAfterSeconds).toBe(60)
    expect(error.internal.detail).toContain('client:a')
  })

  it('user keys share the per-client allowance; ip keys have their own, larger one', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 2, failures_per_ip: 5 }))
    await fail(throttle, ['user:alice', 'ip:192.0.2.1'])
    await fail(throttle, ['user:alice', 'ip:192.0.2.1'])
    await refusal(throttle.reserve(['user:alice']))
    await fail(throttle, ['ip:192.0.2.1'])
    await fail(throttle, ['ip:192.0.2.1'])
    await fail(throttle, ['ip:192.0.2.1'])
    await refusal(throttle.reserve(['ip:192.0.2.1']))
  })

  it('refuses when any one of the keys is exhausted, and a refused attempt counts on none of its keys', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 1, failures_per_ip: 2 }))
    await fail(throttle, ['client:a'])
    for (let refused = 0; refused < 5; refused++) await refusal(throttle.reserve(['client:b', 'client:a', 'ip:192.0.2.1']))
    // Neither client:b nor the address was charged for the refusals: each still has its whole allowance.
    await fail(throttle, ['client:b', 'ip:192.0.2.1'])
    await refusal(throttle.reserve(['client:b']))
    await fail(throttle, ['ip:192.0.2.1'])
    await refusal(throttle.reserve(['ip:192.0.2.1']))
  })

  it('Retry-After counts down, and the key is allowed again once the window has passed', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 1, window: '30s' }))
    await fail(throttle, ['client:a'])
    vi.advanceTimersByTime(20_500)
    expect((await refusal(throttle.reserve(['client:a']))).retryAfterSeconds).toBe(10)
    vi.advanceTimersByTime(9_600)
    await succeed(throttle, ['client:a'])
  })

  it('parallel guessing: of 100 attempts reserved in parallel exactly failures_per_client are let through; the rest wait, and are 429 once those fail', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 10, failures_per_ip: 1000 }))
    const settled: Array<Attempt | TooManyAttempts> = []
    const pending = Array.from({ length: 100 }, () => throttle.reserve(['client:a', 'ip:192.0.2.1'])
      .then((attempt) => { settled.push(attempt) }, (error: unknown) => { settled.push(error as TooManyAttempts) }))
    await vi.advanceTimersByTimeAsync(0)
    // Ten hold a place; the other ninety wait for them (the places are held by attempts in flight, not failures).
    expect(settled).toHaveLength(10)
    const granted = settled.filter((outcome): outcome is Attempt => !(outcome instanceof TooManyAttempts))
    expect(granted).toHaveLength(10)
    for (const attempt of granted) attempt.keep()
    await vi.advanceTimersByTimeAsync(200)
    await Promise.all(pending)
    const refused = settled.filter((outcome) => outcome instanceof TooManyAttempts)
    expect(refused).toHaveLength(90)
    await refusal(throttle.reserve(['client:a']))
    // The 90 refusals cost the address nothing: it has 990 attempts left.
    const ip = await Promise.allSettled(Array.from({ length: 990 }, () => throttle.reserve(['ip:192.0.2.1'])))
    expect(ip.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(990)
    const last = throttle.reserve(['ip:192.0.2.1']).then(() => 'granted', (error: unknown) => error)
    await vi.advanceTimersByTimeAsync(IN_FLIGHT_WAIT_MS + 100)
    expect(await last).toBeInstanceOf(TooManyAttempts)
  })

  it('right secrets sent at once are never refused: an attempt that finds every place held in flight waits for them', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 3, failures_per_ip: 1000 }))
    let succeeded = 0
    const all = Promise.all(Array.from({ length: 50 }, async () => {
      const attempt = await throttle.reserve(['client:a', 'ip:192.0.2.1'])
      await new Promise((resolve) => setTimeout(resolve, 10))
      await attempt.release()
      succeeded++
    }))
    await vi.advanceTimersByTimeAsync(IN_FLIGHT_WAIT_MS)
    await all
    expect(succeeded).toBe(50)
  })

  it('attempts in flight hold their point; a waiting attempt gets one given back, a failure keeps it; the wait is bounded', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 2 }))
    const first = await throttle.reserve(['client:a'])
    const second = await throttle.reserve(['client:a'])
    const waiting = throttle.reserve(['client:a'])
    await vi.advanceTimersByTimeAsync(50)
    await first.release()
    await vi.advanceTimersByTimeAsync(100)
    const third = await waiting
    second.keep()
    // Still one attempt in flight and one failure: a fourth waits for the third, and is refused after the bound.
    const fourth = throttle.reserve(['client:a']).then(() => 'granted', (error: unknown) => error)
    await vi.advanceTimersByTimeAsync(IN_FLIGHT_WAIT_MS + 100)
    expect(await fourth).toBeInstanceOf(TooManyAttempts)
    await third.release()
    await fail(throttle, ['client:a'])
    // Both places are failures now: refused at once, without waiting.
    const locked = throttle.reserve(['client:a']).then(() => 'granted', (error: unknown) => error)
    await vi.advanceTimersByTimeAsync(0)
    expect(await locked).toBeInstanceOf(TooManyAttempts)
  })

  it('successes interleaved with failures give back only their own points, so they never reset a count', async () => {
    // An attacker with a client of its own, guessing another's secret from the same address.
    const throttle = createThrottle(settings({ failures_per_client: 1000, failures_per_ip: 3 }))
    for (let round = 0; round < 3; round++) {
      await succeed(throttle, ['client:mine', 'ip:192.0.2.1'])
      await succeed(throttle, ['client:mine', 'ip:192.0.2.1'])
      await fail(throttle, ['client:victim', 'ip:192.0.2.1'])
    }
    await refusal(throttle.reserve(['client:victim', 'ip:192.0.2.1']))
    await refusal(throttle.reserve(['client:mine', 'ip:192.0.2.1']))
    // Releasing twice, or after a keep, gives nothing back either.
    const throttle2 = createThrottle(settings({ failures_per_client: 1 }))
    const attempt = await throttle2.reserve(['client:a'])
    attempt.keep()
    await attempt.release()
    await attempt.release()
    await refusal(throttle2.reserve(['client:a']))
  })

  it('a point taken at the end of a window is not given back in the next one (no credit there)', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 2, window: '10s' }))
    await fail(throttle, ['client:a'])
    vi.advanceTimersByTime(9_500)
    const late = await throttle.reserve(['client:a'])
    vi.advanceTimersByTime(1_000)
    await late.release()
    // The new window holds exactly failures_per_client failures, not one more.
    await fail(throttle, ['client:a'])
    await fail(throttle, ['client:a'])
    await refusal(throttle.reserve(['client:a']))
  })

  it('throttle.engaged: once, when the failure that took the last point is kept; not when that attempt succeeds', async () => {
    const engaged: Parameters<ThrottleEngaged>[0][] = []
    const throttle = createThrottle(settings({ failures_per_client: 2, window: '1m' }), undefined, 'failures', (event) => engaged.push(event))
    await fail(throttle, ['client:a'])
    await succeed(throttle, ['client:a'])
    expect(engaged).toEqual([])
    const last = await throttle.reserve(['client:a'])
    vi.advanceTimersByTime(15_000)
    last.keep()
    expect(engaged).toEqual([{ throttle: 'failures', key: 'client:a', retryAfterSeconds: 45 }])
    for (let refused = 0; refused < 3; refused++) await refusal(throttle.reserve(['client:a']))
    expect(engaged).toHaveLength(1)
  })

  it('release never throws when the limiter store fails; a reserve that fails gives back what it took', async () => {
    const broken = (fails: 'reward' | 'consume') => (options: LimiterOptions) => {
      const counters = new RateLimiterMemory({ ...options })
      if (fails === 'reward') counters.reward = () => Promise.reject(new Error('store down'))
      else if (options.keyPrefix.endsWith('-ip')) counters.consume = () => Promise.reject(new Error('store down'))
      return { counters }
    }
    const noReward = createThrottle(settings({}), broken('reward'))
    await expect((await noReward.reserve(['client:a', 'ip:192.0.2.1'])).release()).resolves.toBeUndefined()
    const noIpStore = createThrottle(settings({ failures_per_client: 1 }), broken('consume'))
    for (let failed = 0; failed < 3; failed++) await expect(noIpStore.reserve(['client:a', 'ip:192.0.2.1'])).rejects.toThrow('store down')
    // client:a's point was given back each time: its one attempt is still there.
    await fail(noIpStore, ['client:a'])
    await refusal(noIpStore.reserve(['client:a']))
  })

  it('while the shared counters fail, the insurance counts; a point is given back to the counters that took it, never to the others', async () => {
    let storeUp = false
    const rewards = { counters: 0, insurance: 0 }
    const throttle = createThrottle(settings({ failures_per_client: 2 }), (options) => {
      const counters = new RateLimiterMemory({ ...options })
      const insurance = new RateLimiterMemory({ ...options })
      for (const [name, limiter] of [['counters', counters], ['insurance', insurance]] as const) {
        const reward = limiter.reward.bind(limiter)
        limiter.reward = (key, points) => { rewards[name]++; return reward(key, points) }
      }
      const consume = counters.consume.bind(counters)
      counters.consume = (key, points) => (storeUp ? consume(key, points) : Promise.reject(new Error('store down')))
      return { counters, insurance }
    })
    const during = await throttle.reserve(['client:a'])
    storeUp = true
    await during.release()
    expect(rewards).toEqual({ counters: 0, insurance: 1 })
    // The shared counters were not credited: they still hold the whole allowance and not one more.
    await fail(throttle, ['client:a'])
    await fail(throttle, ['client:a'])
    await refusal(throttle.reserve(['client:a']))
  })

  it('builds its limiters through the factory (the seam for RateLimiterRedis), in whole seconds', () => {
    const built: LimiterOptions[] = []
    createThrottle(settings({ failures_per_client: 7, failures_per_ip: 70, window: '1500ms' }), (options) => {
      built.push(options)
      return { counters: new RateLimiterMemory({ ...options }) }
    })
    // Per identity and per address, each a reservation counter and a failure counter.
    expect(built.map(({ points, duration }) => ({ points, duration }))).toEqual([
      { points: 7, duration: 2 }, { points: 7, duration: 2 }, { points: 70, duration: 2 }, { points: 70, duration: 2 }])
    expect(new Set(built.map((options) => options.keyPrefix)).size).toBe(4)
  })
})

describe('verifyThrottled', () => {
  it('keeps the attempt on a failed outcome or a throw, gives it back on a success, and never verifies when locked', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 2 }))
    let verifications = 0
    const verify = (outcome: boolean) => () => { verifications++; return Promise.resolve(outcome) }
    for (let success = 0; success < 5; success++) expect(await verifyThrottled(throttle, ['user:a'], verify(true))).toBe(true)
    expect(await verifyThrottled(throttle, ['user:a'], verify(false))).toBe(false)
    await expect(verifyThrottled(throttle, ['user:a'], () => Promise.reject(new Error('boom')))).rejects.toThrow('boom')
    await refusal(verifyThrottled(throttle, ['user:a'], verify(true)))
    expect(verifications).toBe(6)
  })
})
