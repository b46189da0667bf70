/**
 * The generic cell rate algorithm (GCRA, a token bucket kept as one number): a policy of `limit` requests per
 * `window` with a bucket of `burst` admits a request when the key's theoretical arrival time (TAT) is at most
 * `burst` emission intervals ahead of now. One number per key, updated in place: the memory store keeps it in
 * a Map, the Redis store in one key by one script (redis.ts, the same arithmetic in Lua).
 *
 * With `burst` = `limit` (the default), `limit` requests at once are admitted and the next is refused until
 * one interval (`window / limit`) has passed: "N allowed, N+1 refused", refilled continuously, with no
 * window edge where twice the limit gets through (a fixed window's flaw).
 */

export interface GcraParameters {
  /** window / limit, in ms: how long one request's share of the budget takes to come back. */
  readonly emissionMs: number
  /** burst × emissionMs: how far ahead of now the TAT may run. */
  readonly toleranceMs: number
}

export interface GcraOutcome {
  readonly allowed: boolean
  /** The TAT to store (unchanged when refused). */
  readonly tat: number
  /** Requests that would still be admitted now, after this one. */
  readonly remaining: number
  /** When refused: ms until one request is admitted again; 0 when allowed. */
  readonly retryAfterMs: number
  /** ms until the bucket is full again. */
  readonly resetMs: number
}

export function gcraParameters(limit: number, windowMs: number, burst: number): GcraParameters {
  const emissionMs = windowMs / limit
  return { emissionMs, toleranceMs: emissionMs * burst }
}

/** One request at `now` against a key whose stored TAT is `storedTat` (0 when unknown). */
export function gcra(storedTat: number, now: number, { emissionMs, toleranceMs }: GcraParameters): GcraOutcome {
  const tat = storedTat > now ? storedTat : now
  const next = tat + emissionMs
  // A hundredth of a millisecond of slack: at epoch milliseconds a double is only good to about 0.0002 ms.
  if (next - now > toleranceMs + 0.01) {
    return { allowed: false, tat: storedTat, remaining: 0, retryAfterMs: Math.ceil(next - toleranceMs - now), resetMs: Math.ceil(tat - now) }
  }
  return { allowed: true, tat: next, remaining: Math.floor((toleranceMs - (next - now) + 0.01) / emissionMs), retryAfterMs: 0, resetMs: Math.ceil(next - now) }
}

/**
 * One request against several policies, all or nothing: each policy's outcome as {@link gcra} gives it, but the
 * TATs are to be stored only if every policy admits. When one refuses, the others spend nothing, and their
 * outcomes say what is left without this request (`remaining` one more, `resetMs` as before it, `tat` the stored
 * one): a client refused by a tight policy keeps the budget of a roomy one.
 */
export function gcraAll(storedTats: readonly number[], now: number, parameters: readonly GcraParameters[]): { admitted: boolean; outcomes: GcraOutcome[] } {
  const outcomes = storedTats.map((stored, i) => gcra(stored, now, parameters[i]!))
  if (outcomes.every((outcome) => outcome.allowed)) return { admitted: true, outcomes }
  return {
    admitted: false,
    outcomes: outcomes.map((outcome, i) => (outcome.allowed
      ? { allowed: true, tat: storedTats[i]!, remaining: outcome.remaining + 1, retryAfterMs: 0, resetMs: Math.max(0, Math.ceil(storedTats[i]! - now)) }
      : outcome)),
  }
}
