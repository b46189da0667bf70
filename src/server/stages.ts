/**
 * The request path as data: each mode's stages in order, each a function of the one per-request exchange
 * (src/server/exchange.ts). The proxy and decision modes share every stage from the route match to the rate
 * limit; only how the request arrives and the last stage differ.
 *
 *   proxy     normalize → match → cors → admit → authenticate → bind → authorize → rate-limit → body → forward
 *   decision  describe  → match → undecidable → authenticate → bind → authorize → rate-limit → answer
 *   upgrade   (RFC 6455 head checks) → match → authenticate → bind → authorize → rate-limit → (tunnel)
 *
 * Rate limits come after authorization: a forged token spends no one's budget, and a request its scopes refuse
 * spends none of the route's (docs/configuration.md, `rate_limits`).
 */
import type { Stage } from './exchange.js'
import { answer, describe, undecidable } from './stages/decide.js'
import { body, forward } from './stages/forward.js'
import { rateLimit } from './stages/limits.js'
import { admit, cors, match, normalize } from './stages/route.js'
import { authenticate, authorize, bind } from './stages/token.js'

export const PROXY_STAGES: readonly Stage[] = [normalize, match, cors, admit, authenticate, bind, authorize, rateLimit, body, forward]

export const DECISION_STAGES: readonly Stage[] = [describe, match, undecidable, authenticate, bind, authorize, rateLimit, answer]

/** A WebSocket upgrade's checks; the tunnel to the upstream follows them (pipeline.ts). */
export const UPGRADE_STAGES: readonly Stage[] = [match, authenticate, bind, authorize, rateLimit]
