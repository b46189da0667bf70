/**
 * Rate-limit: the route's policies (`rate_limits`), after the token is authenticated and authorized (a forged
 * token spends no one's budget, and a refused request none of the route's); anonymous requests count under
 * their address. In memory this stays synchronous.
 */
import type { Exchange } from '../exchange.js'

export function rateLimit(ex: Exchange): Promise<void> | undefined {
  if (ex.rule.rateLimits === null) return undefined
  // An upgrade's answer is the upstream's 101: no RateLimit fields to add to it.
  const fields = ex.rt.rateLimiter!.check(ex, ex.mode !== 'upgrade' && ex.rule.rateLimitHeaders)
  if (fields instanceof Promise) return fields.then((shared) => { ex.rateLimitFields = shared })
  ex.rateLimitFields = fields
  return undefined
}
