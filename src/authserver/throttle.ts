/**
 * Brute-force protection of client authentication, passwords and user codes (RFC 6749 §2.3.1, §4.3.2;
 * RFC 8628 §5.1): failures are counted per key in a fixed window; once a key has used up its allowance, every
 * attempt is refused with 429 temporarily_unavailable and Retry-After until the window ends. An attempt is
 * counted (reserved) atomically *before* its secret is verified and given back only if it succeeds, so a
 * burst sent in parallel gets no more verifications than the allowance, across replicas too. An attempt that
 * finds the allowance taken by attempts still in flight (not by failures) waits for them, up to
 * IN_FLIGHT_WAIT_MS, instead of being refused: right secrets sent at once are never 429.
 */
import { RateLimiterCluster, RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible'
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

/** One set of counters, and for a shared store the in-memory one that counts while that store fails. */
export interface Limiter {
  readonly counters: RateLimiterAbstract
  readonly insurance?: RateLimiterAbstract
}

/** Builds one limiter; the memory one by default, a RateLimiterRedis over a shared client for several replicas. */
export type LimiterFactory = (options: LimiterOptions) => Limiter

export const memoryLimiter: LimiterFactory = (options) => ({ counters: new RateLimiterMemory({ ...options }) })

/**
 * Counters in Redis, shared by every instance: a brute force spread over replicas is counted
 * once. While Redis is unreachable each instance counts in memory (the insurance), so throttling never
 * stops and never fails a request. The throttle falls back itself (not rate-limiter-flexible's
 * insuranceLimiter), so that a point is given back to the counters that took it, never to the others.
 */
export function redisLimiter(client: RedisLike, prefix: string): LimiterFactory {
  return (options) => ({
    counters: new RateLimiterRedis({ ...options, keyPrefix: `${prefix}${options.keyPrefix}`, storeClient: client }),
    insurance: new RateLimiterMemory({ ...options }),
  })
}

/**
 * Counters kept by the primary for every worker of one machine (`server.workers`): rate-limiter-flexible's
 * RateLimiterCluster asks the primary's RateLimiterClusterMaster over IPC, so a brute force spread over workers is
 * counted once. The primary not answering within a second, each worker counts in memory meanwhile.
 */
export const clusterLimiter: LimiterFactory = (options) => ({
  counters: new RateLimiterCluster({ ...options, timeoutMs: 1000 }),
  insurance: new RateLimiterMemory({ ...options }),
})

/** The ioredis client, as rate-limiter-flexible uses it. */
type RedisLike = object

function positiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new TypeError(`${name} must be a positive integer, got ${value}`)
  return value
}

/** The allowances of one throttle: the token endpoint's and login's come from `throttling:`; the /device page's are fixed. */
export type ThrottleLimits = Pick<AuthServerSettings, 'failuresPerClient' | 'failuresPerIp' | 'throttleWindowSeconds'>

/** RFC 8628 §5.1: five wrong user codes per browser session or per address in five minutes. */
export const USER_CODE_LIMITS: ThrottleLimits = { failuresPerClient: 5, failuresPerIp: 5, throttleWindowSeconds: 300 }

/**
 * Every interaction is a row in the store for ten minutes, and /authorize (or /device) creates one for
 * anyone: at most 300 a minute per address, then 429 / temporarily_unavailable, so a flood of anonymous
 * requests cannot fill the store. Every creation is an attempt that is kept, never released.
 */
export const INTERACTION_LIMITS: ThrottleLimits = { failuresPerClient: 300, failuresPerIp: 300, throttleWindowSeconds: 60 }

/** Told when a key has just used up its allowance: once per lockout (the audit event `throttle.engaged`). */
export type ThrottleEngaged = (engaged: { throttle: string; key: string; retryAfterSeconds: number }) => void

/**
 * A given-back point must fall in the window it was taken from: given back in the next one it would be a
 * credit there (the key would start that window at -1). Within this much of its window's end a point is
 * left to expire instead; with Redis the window's end is known only to within one round trip.
 */
const RELEASE_MARGIN_MS = 1000

/** The point one attempt took from one key, the counters that hold it, and when its window ends. */
interface Held {
  readonly key: string
  readonly counters: RateLimiterAbstract
  readonly consumedPoints: number
  readonly windowEndsAt: number
  /** The key had no attempt left: the point is given back at once. */
  readonly refused: boolean
}

/** How long the throttle counts in memory alone after its shared store failed, before it tries the store again. */
const SHARED_RETRY_MS = 5000
/** The longest an attempt waits for places held by attempts in flight before it is refused after all. */
export const IN_FLIGHT_WAIT_MS = 1000
/** Its first look again, then each pause doubled up to the longest (places given back in another process are only seen by looking). */
const FIRST_PAUSE_MS = 5
const LONGEST_PAUSE_MS = 80

/** consume() of one point, a refusal included (consume counts it all the same); a store failure throws. */
async function consumeOne(counters: RateLimiterAbstract, key: string): Promise<Held> {
  const held = (state: RateLimiterRes, refused: boolean): Held =>
    ({ key, counters, consumedPoints: state.consumedPoints, windowEndsAt: Date.now() + state.msBeforeNext, refused })
  try {
    return held(await counters.consume(key, 1), false)
  } catch (error) {
    if (error instanceof RateLimiterRes) return held(error, true)
    throw error
  }
}

/** A key's counters: its reservations (failures and attempts in flight) and its failures alone. */
interface Family {
  readonly reserved: Limiter
  readonly failures: Limiter
}

function family(createLimiter: LimiterFactory, keyPrefix: string, duration: number, points: number): Family {
  return {
    reserved: createLimiter({ keyPrefix, duration, points }),
    failures: createLimiter({ keyPrefix: `${keyPrefix}-failed`, duration, points }),
  }
}

/** Every key was free: the points this attempt holds. Otherwise the keys that had no place left. */
type Reservation = { held: Held[]; exhausted?: undefined } | { held?: undefined; exhausted: Held[] }

/** `name` keeps the counters of two throttles apart in a shared limiter store. */
export function createThrottle(settings: ThrottleLimits, createLimiter: LimiterFactory = memoryLimiter, name = 'failures',
  onEngaged?: ThrottleEngaged): Throttle {
  // Limiters count in whole seconds; a sub-second window would never hold a failure.
  const duration = Math.max(1, Math.ceil(settings.throttleWindowSeconds))
  // `client:`, `user:` and `session:` keys name one identity an attacker guesses for; `ip:` keys one source,
  // which may be a NAT in front of many honest clients, hence its own (larger) allowance.
  const perIdentity = family(createLimiter, `portcullis-${name}-identity`, duration, positiveInteger('failures_per_client', settings.failuresPerClient))
  const perIp = family(createLimiter, `portcullis-${name}-ip`, duration, positiveInteger('failures_per_ip', settings.failuresPerIp))
  const familyOf = (key: string) => (key.startsWith('ip:') ? perIp : perIdentity)
  // A shared store that failed is left alone for SHARED_RETRY_MS: meanwhile the insurance counts at once, so
  // that a Redis that hangs costs one command timeout, not one per attempt (the token endpoint's 2 s bound).
  let sharedDownUntil = 0
  /** `op` on the limiter's shared counters, or on its insurance while they are down or when they fail now. */
  const counted = <T>({ counters, insurance }: Limiter, op: (on: RateLimiterAbstract) => Promise<T>): Promise<T> => {
    if (insurance !== undefined && Date.now() < sharedDownUntil) return op(insurance)
    return op(counters).catch((error: unknown) => {
      if (insurance === undefined) throw error
      sharedDownUntil = Date.now() + SHARED_RETRY_MS
      return op(insurance)
    })
  }
  const take = (key: string): Promise<Held> => counted(familyOf(key).reserved, (on) => consumeOne(on, key))
  // reward() cannot fail the caller: a point not given back (store down) expires with its window.
  const release = (held: readonly Held[]) => Promise.all(held.map(({ key, counters, windowEndsAt }) =>
    (Date.now() < windowEndsAt - RELEASE_MARGIN_MS ? counters.reward(key, 1).catch(() => undefined) : undefined))).then(() => undefined)
  // A failure is also counted on its own, so that a full key tells failures from attempts in flight. Not
  // counted (store down): the attempt only waits longer before its refusal. Past the allowance is no failure of the store.
  const recordFailure = (key: string) => {
    void counted(familyOf(key).failures, (on) => on.consume(key, 1).catch((error: unknown) => {
      if (error instanceof RateLimiterRes) return undefined
      throw error
    })).catch(() => undefined)
  }
  /** Whether `key` is full of failures (not of attempts in flight); unknown (store down) counts as full. */
  const failedOut = async (key: string): Promise<boolean> => {
    const failures = familyOf(key).failures
    try {
      const state = await counted(failures, (on) => on.get(key))
      return state !== null && state.consumedPoints >= failures.counters.points
    } catch {
      return true
    }
  }

  // Attempts waiting for a place, oldest first: a place given back in this process wakes the oldest at once;
  // one given back in another process (a worker, an instance) is found at its next look.
  const waiting = new Set<() => void>()
  const wakeOne = () => {
    const oldest = waiting.values().next()
    if (oldest.done !== true) oldest.value()
  }
  const pause = (ms: number) => new Promise<void>((resolve) => {
    const wake = () => {
      waiting.delete(wake)
      clearTimeout(timer)
      resolve()
    }
    // Jittered, so that waiters started together do not all look at the same moment.
    const timer = setTimeout(wake, ms * (0.5 + Math.random()))
    waiting.add(wake)
  })

  /** One try: a point on every key, or, when one is full, none on any (a refused attempt is not evaluated). */
  const tryReserve = async (keys: readonly string[]): Promise<Reservation> => {
    // consume() is one atomic increment per key (in-process, or one Lua script in Redis), so parallel
    // attempts each see the count including every attempt started before them.
    const outcomes = await Promise.allSettled(keys.map(take))
    const held = outcomes.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []))
    const failed = outcomes.find((outcome) => outcome.status === 'rejected')
    const exhausted = held.filter((point) => point.refused)
    if (failed === undefined && exhausted.length === 0) return { held }
    // A refused attempt counts on no key: a locked address does not also use up the allowance of the
    // client_id it names, and the count stays "failures + attempts in flight".
    await release(held)
    if (failed !== undefined) throw failed.reason
    return { exhausted }
  }

  const attemptOf = (held: readonly Held[]) => {
    let settled = false
    return {
      keep() {
        if (settled) return
        settled = true
        for (const { key, counters, consumedPoints, windowEndsAt } of held) {
          recordFailure(key)
          // The failure that took the last point starts the lockout: once per lockout, whichever replica
          // counted it, however many refused requests follow.
          if (consumedPoints === counters.points) {
            onEngaged?.({ throttle: name, key, retryAfterSeconds: Math.max(1, Math.ceil((windowEndsAt - Date.now()) / 1000)) })
          }
        }
        // The oldest waiter learns that this place is now a failure (and is refused if it was the last).
        wakeOne()
      },
      async release() {
        if (settled) return
        settled = true
        await release(held)
        wakeOne()
      },
    }
  }

  return {
    async reserve(keys) {
      const deadline = Date.now() + IN_FLIGHT_WAIT_MS
      for (let ms = FIRST_PAUSE_MS; ; ms = Math.min(2 * ms, LONGEST_PAUSE_MS)) {
        const { held, exhausted } = await tryReserve(keys)
        if (held !== undefined) return attemptOf(held)
        // Full of attempts still in flight, not of failures: their outcome decides, so look again shortly.
        const full = await Promise.all(exhausted.map((point) => failedOut(point.key)))
        if (full.includes(true) || Date.now() + ms > deadline) {
          const waitMs = Math.max(...exhausted.map((point) => point.windowEndsAt)) - Date.now()
          throw new TooManyAttempts(Math.max(1, Math.ceil(waitMs / 1000)), `too many failures for ${exhausted.map((point) => point.key).join(', ')}`)
        }
        await pause(ms)
      }
    },
  }
}

/**
 * One throttled verification: counted on `keys` before `verify` runs, given back when its
 * outcome is a success, kept otherwise (a throw included). Throws TooManyAttempts without running `verify`
 * when a key has no attempt left.
 */
export async function verifyThrottled<T>(throttle: Throttle, keys: readonly string[], verify: () => Promise<T>,
  succeeded: (outcome: T) => boolean = Boolean): Promise<T> {
  const attempt = await throttle.reserve(keys)
  let outcome: T
  try {
    outcome = await verify()
  } catch (error) {
    attempt.keep()
    throw error
  }
  if (succeeded(outcome)) await attempt.release()
  else attempt.keep()
  return outcome
}
