/**
 * The request path as data: each mode's stages in order, each a function of the one per-request exchange
 * (src/server/exchange.ts). The proxy and decision modes share every stage from the route match to the rate
 * limit; only how the request arrives and the last stage differ.
 *
 *   proxy     normalize → match → cors → admit → authenticate → bind → authorize → rate-limit → body → forward
 *   decision  describe  → match → undecidable → authenticate → bind → authorize → rate-limit → answer
 *   upgrade   (RFC 6455 head checks) → match → authenticate → bind → authorize → rate-limit → (tunnel)
 *
 * A stage whose feature the config does not use (`cors`, `rate_limits`) is left out of a runtime's lists.
 *
 * Rate limits come after authorization: a forged token spends no one's budget, and a request its scopes refuse
 * spends none of the route's (docs/configuration.md, `rate_limits`).
 */
import type { Stage } from './exchange.js'
import type { GatewayRuntime } from './runtime.js'
import { answer, describe, undecidable } from './stages/decide.js'
import { body, forward } from './stages/forward.js'
import { rateLimit } from './stages/limits.js'
import { admit, cors, match, normalize } from './stages/route.js'
import { authenticate, authorize, bind } from './stages/token.js'

/** A stage, and when a runtime needs it at all: a feature the config does not use costs its requests nothing. */
interface Step {
  readonly stage: Stage
  readonly when?: (rt: GatewayRuntime) => boolean
}

const withCors = (rt: GatewayRuntime) => rt.cors !== null
const withLimits = (rt: GatewayRuntime) => rt.rateLimiter !== null

const PROXY: readonly Step[] = [
  { stage: normalize }, { stage: match }, { stage: cors, when: withCors }, { stage: admit }, { stage: authenticate }, { stage: bind },
  { stage: authorize }, { stage: rateLimit, when: withLimits }, { stage: body }, { stage: forward },
]

const DECISION: readonly Step[] = [
  { stage: describe }, { stage: match }, { stage: undecidable }, { stage: authenticate }, { stage: bind }, { stage: authorize },
  { stage: rateLimit, when: withLimits }, { stage: answer },
]

/** A WebSocket upgrade's checks; the tunnel to the upstream follows them (pipeline.ts). */
const UPGRADE: readonly Step[] = [
  { stage: match }, { stage: authenticate }, { stage: bind }, { stage: authorize }, { stage: rateLimit, when: withLimits },
]

export interface StageLists {
  readonly proxy: readonly Stage[]
  readonly decision: readonly Stage[]
  readonly upgrade: readonly Stage[]
}

/** Each mode's stages for `rt`, made when it is put in service. */
export function stagesFor(rt: GatewayRuntime): StageLists {
  const pick = (steps: readonly Step[]) => steps.filter((step) => step.when?.(rt) ?? true).map((step) => step.stage)
  return { proxy: pick(PROXY), decision: pick(DECISION), upgrade: pick(UPGRADE) }
}
