/** How long the proxy in front may keep an allowed decision (`decision.cache_ttl`). */
import type { Principal } from '../common/principal.js'
import type { CompiledDecision } from './settings.js'

/**
 * `decision.cache_ttl`, never past the token's `exp`; nothing where the decision depends on more than the proxy's
 * cache key (token, method, URI): a DPoP-bound token (a proof is good for one request), a route with rate limits
 * (each request counts) or with conditions on request headers. Two fields say it: `Cache-Control: s-maxage`
 * (RFC 9111 §3.5: a shared cache may reuse an answer to a request with `Authorization` only with it), and nginx's
 * `X-Accel-Expires: @<epoch second>`, because nginx keeps a cached answer through the whole second it expires in
 * (s-maxage=1 was measured keeping a revoked token's decision 1.95 s): the last second named is the one that
 * ends within the bound.
 */
export function cacheFields(decision: CompiledDecision, allowed: { readonly route: string; readonly principal: Principal | undefined },
  nowMs: number, out: Record<string, string | string[]>): void {
  const principal = allowed.principal
  if (decision.cacheSeconds === 0 || decision.uncacheable.has(allowed.route) || principal?.jkt !== undefined) {
    out['cache-control'] = 'no-store'
    return
  }
  const now = nowMs / 1000
  const exp = principal?.expiresAt
  const seconds = exp === undefined ? decision.cacheSeconds : Math.min(decision.cacheSeconds, Math.floor(exp - now))
  if (seconds < 1) {
    out['cache-control'] = 'no-store'
    return
  }
  out['cache-control'] = `s-maxage=${seconds}`
  out['x-accel-expires'] = `@${Math.floor(now) + seconds - 1}`
}
