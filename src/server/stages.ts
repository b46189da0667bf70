/**
 * The request path as data: each mode's stages in order, each a function of the one per-request exchange
 * (src/server/exchange.ts). The proxy and decision modes share every stage from the route match to the rate
 * limit; only how the request arrives and the last stage differ.
 *
 *   proxy     normalize → match → cors → admit → authenticate → bind → authorize → rate-limit → body → forward
 *   decision  describe  → match → mcp-route → authenticate → bind → authorize → mcp-message → rate-limit → answer
 *   upgrade   (RFC 6455 head checks) → match → authenticate → bind → authorize → rate-limit → (tunnel)
 *
 * A stage whose feature the config does not use (`cors`, `rate_limits`) is left out of a runtime's lists. Before
 * a proxy or decision list runs, a request past `server.admission.max_in_flight` is shed (admission.ts).
 *
 * Rate limits come after authorization: a forged token spends no one's budget, and a request its scopes refuse
 * spends none of the route's (docs/configuration.md, `rate_limits`).
 */
import { runStages, type Exchange, type Stage } from './exchange.js'
import type { GatewayRuntime } from './runtime.js'
import { answer, describe, mcpMessage, mcpRoute } from './stages/decide.js'
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
  { stage: describe }, { stage: match }, { stage: mcpRoute }, { stage: authenticate }, { stage: bind }, { stage: authorize },
  { stage: mcpMessage }, { stage: rateLimit, when: withLimits }, { stage: answer },
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

/** Resumes `list` after `stage`, once the promise it returned settles (a JWKS fetch, introspection, a body). */
function resume(list: readonly Stage[], stage: Stage, pending: Promise<void>, ex: Exchange): Promise<void> {
  const next = list.indexOf(stage) + 1
  return pending.then(() => (ex.answered ? undefined : runStages(list, ex, next)))
}

/**
 * The proxy list run as `runStages(list, ex)` would run it, written out: each stage called by its name, so that
 * V8 sees ten call sites of one target each (and may inline them) instead of one call site of ten targets. The
 * order is PROXY's, above; a stage that returns a promise hands the rest of `list` to runStages.
 */
export function runProxy(list: readonly Stage[], ex: Exchange): Promise<void> | undefined {
  const rt = ex.rt
  normalize(ex)
  if (ex.answered) return undefined
  match(ex)
  if (ex.answered) return undefined
  if (rt.cors !== null) {
    cors(ex)
    if (ex.answered) return undefined
  }
  admit(ex)
  if (ex.answered) return undefined
  let pending = authenticate(ex)
  if (pending !== undefined) return resume(list, authenticate, pending, ex)
  if (ex.answered) return undefined
  pending = bind(ex)
  if (pending !== undefined) return resume(list, bind, pending, ex)
  if (ex.answered) return undefined
  authorize(ex)
  if (ex.answered) return undefined
  if (rt.rateLimiter !== null) {
    pending = rateLimit(ex)
    if (pending !== undefined) return resume(list, rateLimit, pending, ex)
    if (ex.answered) return undefined
  }
  pending = body(ex)
  if (pending !== undefined) return resume(list, body, pending, ex)
  if (ex.answered) return undefined
  return forward(ex)
}
