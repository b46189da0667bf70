import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { RateLimiterMemory } from 'rate-limiter-flexible'
import { TooManyAttempts } from '../errors/oauth-errors.js'
import { resolveSettings } from './settings.js'
import { createThrottle, type LimiterOptions } from './throttle.js'

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

describe('createThrottle', () => {
  beforeEach(() => { vi.useFakeTimers({ now: new Date('2026-01-01T00:00:00Z') }) })
  afterEach(() => { vi.useRealTimers() })

  it('CA-09 lets a client key fail failures_per_client times, then refuses it with 429 and Retry-After', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 3, window: '1m' }))
    for (let failure = 0; failure < 3; failure++) {
      await throttle.check(['client:a'])
      await throttle.fail(['client:a'])
    }
    const error = await refusal(throttle.check(['client:a']))
    expect(error.status).toBe(429)
    expect(error.code).toBe('temporarily_unavailable')
    expect(error.retryAfterSeconds).toBe(60)
    expect(error.internal.detail).toContain('client:a')
  })

  it('PW-04 user keys share the per-client allowance; ip keys have their own, larger one', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 2, failures_per_ip: 5 }))
    await throttle.fail(['user:alice', 'ip:192.0.2.1'])
    await throttle.fail(['user:alice', 'ip:192.0.2.1'])
    await refusal(throttle.check(['user:alice']))
    await throttle.check(['ip:192.0.2.1'])
    await throttle.fail(['ip:192.0.2.1'])
    await throttle.fail(['ip:192.0.2.1'])
    await throttle.check(['ip:192.0.2.1'])
    await throttle.fail(['ip:192.0.2.1'])
    await refusal(throttle.check(['ip:192.0.2.1']))
  })

  it('CA-09 refuses when any one of the keys is exhausted, and only keys that failed', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 1 }))
    await throttle.fail(['client:a'])
    await refusal(throttle.check(['client:b', 'client:a', 'ip:192.0.2.1']))
    await throttle.check(['client:b', 'ip:192.0.2.1'])
  })

  it('CA-09 Retry-After counts down, and the key is allowed again once the window has passed', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 1, window: '30s' }))
    await throttle.fail(['client:a'])
    vi.advanceTimersByTime(20_500)
    expect((await refusal(throttle.check(['client:a']))).retryAfterSeconds).toBe(10)
    vi.advanceTimersByTime(9_600)
    await throttle.check(['client:a'])
  })

  it('fail never throws, past the limit or when the limiter store fails', async () => {
    const throttle = createThrottle(settings({ failures_per_client: 1 }))
    for (let failure = 0; failure < 5; failure++) await throttle.fail(['client:a'])
    await refusal(throttle.check(['client:a']))
    const broken = createThrottle(settings({}), (options) => {
      const limiter = new RateLimiterMemory({ ...options })
      limiter.penalty = () => Promise.reject(new Error('store down'))
      return limiter
    })
    await expect(broken.fail(['client:a', 'ip:192.0.2.1'])).resolves.toBeUndefined()
  })

  it('builds its limiters through the factory (the seam for RateLimiterRedis), in whole seconds', () => {
    const built: LimiterOptions[] = []
    createThrottle(settings({ failures_per_client: 7, failures_per_ip: 70, window: '1500ms' }), (options) => {
      built.push(options)
      return new RateLimiterMemory({ ...options })
    })
    expect(built.map(({ points, duration }) => ({ points, duration }))).toEqual([{ points: 7, duration: 2 }, { points: 70, duration: 2 }])
    expect(new Set(built.map((options) => options.keyPrefix)).size).toBe(2)
  })
})
