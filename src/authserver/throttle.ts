/**
 * Brute-force protection of client authentication and the password grant (checklist CA-09, PW-04):
 * failures are counted per key in a fixed window; once a key has used up its allowance, `check` answers
 * 429 temporarily_unavailable with Retry-After until the window ends.
 */
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract } from 'rate-limiter-flexible'
import { TooManyAttempts } from '../errors/oauth-errors.js'
import type { Throttle } from './context.js'
import type { AuthServerSettings } from './settings.js'

export interface LimiterOptions {
  readonly keyPrefix: string
  /** Failures allowed per key within the window. */
  readonly points: number
  /** The window, in whole seconds. */
  readonly duration: number
}

/** Builds one limiter; the memory one by default, a RateLimiterRedis over a shared client for several replicas. */
export type LimiterFactory = (options: LimiterOptions) => RateLimiterAbstract

export const memoryLimiter: LimiterFactory = (options) => new RateLimiterMemory({ ...options })

/**
 * Counters in Redis, shared by every instance (issue 7): a brute force spread over replicas is counted
 * once. While Redis is unreachable each instance counts in memory (the insurance limiter), so throttling
 * never stops and never fails a request.
 */
export function redisLimiter(client: RedisLike, prefix: string): LimiterFactory {
  return (options) => new RateLimiterRedis({
    ...options, keyPrefix: `${prefix}${options.keyPrefix}`, storeClient: client, insuranceLimiter: new RateLimiterMemory({ ...options }),
  })
}

/** The ioredis client, as rate-limiter-flexible uses it. */
type RedisLike = object

function positiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new TypeError(`${name} must be a positive integer, got ${value}`)
  return value
}

/** The allowances of one throttle: the token endpoint's and login's come from `throttling:`; DV-04's are fixed. */
export type ThrottleLimits = Pick<AuthServerSettings, 'failuresPerClient' | 'failuresPerIp' | 'throttleWindowSeconds'>

/** DV-04 [DECISION]: five wrong user codes per browser session or per address in five minutes. */
export const USER_CODE_LIMITS: ThrottleLimits = { failuresPerClient: 5, failuresPerIp: 5, throttleWindowSeconds: 300 }

/**
 * Every interaction is a row in the store for ten minutes, and /authorize (or /device) creates one for
 * anyone: at most 300 a minute per address, then 429 / temporarily_unavailable, so a flood of anonymous
 * requests cannot fill the store. Counted on every creation (`fail`), not only on failures.
 */
export const INTERACTION_LIMITS: ThrottleLimits = { failuresPerClient: 300, failuresPerIp: 300, throttleWindowSeconds: 60 }

/** Told when a key has just used up its allowance: once per lockout (the audit event `throttle.engaged`). */
export type ThrottleEngaged = (engaged: { throttle: string; key: string; retryAfterSeconds: number }) => void

/** `name` keeps the counters of two throttles apart in a shared limiter store. */
export function createThrottle(settings: ThrottleLimits, createLimiter: LimiterFactory = memoryLimiter, name = 'failures',
  onEngaged?: ThrottleEngaged): Throttle {
  // Limiters count in whole seconds; a sub-second window would never hold a failure.
  const duration = Math.max(1, Math.ceil(settings.throttleWindowSeconds))
  // `client:`, `user:` and `session:` keys name one identity an attacker guesses for; `ip:` keys one source,
  // which may be a NAT in front of many honest clients, hence its own (larger) allowance.
  const perIdentity = createLimiter({
    keyPrefix: `portcullis-${name}-identity`, duration,
    points: positiveInteger('failures_per_client', settings.failuresPerClient),
  })
  const perIp = createLimiter({
    keyPrefix: `portcullis-${name}-ip`, duration,
    points: positiveInteger('failures_per_ip', settings.failuresPerIp),
  })
  const limiterFor = (key: string) => (key.startsWith('ip:') ? perIp : perIdentity)

  return {
    async check(keys) {
      let waitMs = 0
      const exhausted: string[] = []
      for (const key of keys) {
        const limiter = limiterFor(key)
        const state = await limiter.get(key)
        if (state && state.consumedPoints >= limiter.points && state.msBeforeNext > 0) {
          exhausted.push(key)
          waitMs = Math.max(waitMs, state.msBeforeNext)
        }
      }
      if (exhausted.length > 0) {
        throw new TooManyAttempts(Math.max(1, Math.ceil(waitMs / 1000)), `too many failures for ${exhausted.join(', ')}`)
      }
    },
    async fail(keys) {
      // penalty() counts without rejecting past the limit. A limiter store outage must not turn the
      // caller's 400/401 into a 500, so it is swallowed here; the next check() surfaces it.
      await Promise.all(keys.map((key) => {
        const limiter = limiterFor(key)
        return limiter.penalty(key, 1).then((state) => {
          // The failure that uses up the allowance starts the lockout. Counts only grow within a window, so this
          // is once per lockout, whichever replica counted it, however many refused requests follow.
          if (state.consumedPoints === limiter.points) {
            onEngaged?.({ throttle: name, key, retryAfterSeconds: Math.max(1, Math.ceil(state.msBeforeNext / 1000)) })
          }
        }).catch(() => undefined)
      }))
    },
  }
}
