/**
 * One request on its way through the stages (src/server/stages/): what came in, what each stage learned, and
 * what the log line and metrics say of it at the end. Every stage is a function of this one object; the
 * object is made once per request, with every field present from the start (one shape for V8).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Readable } from 'node:stream'
import type { Principal } from '../common/principal.js'
import type { Waiting } from '../common/waiting.js'
import type { CorsAnswer } from '../cors/policy.js'
import type { ResourceChallenge } from '../errors/render.js'
import type { ForwardHandler } from '../forward/proxy.js'
import type { HeaderList } from '../forward/upstream-headers.js'
import type { Decision } from '../metrics/metrics.js'
import type { CompiledRule } from '../rules/compile.js'
import type { Span } from '../tracing/tracing.js'
import type { GatewayRuntime } from './runtime.js'

/** What one request did, for its log line and its metrics (filled in as the request goes). */
export interface Outcome {
  route: string
  decision: Decision
  /** The error code when refused ('' when forwarded); bounded, so it can be a label. */
  error: string
  /** The precise reason, for the log only. */
  detail?: string | undefined
  /** Our own failure (500s): logged with its stack. */
  cause?: unknown
  /** The upstream request in flight, told when the client goes away. */
  forwarding?: ForwardHandler | undefined
  /** The RFC 9728 metadata URL of the matched route's resource, for the challenges. */
  resourceMetadata?: ResourceChallenge | undefined
  /** CORS headers for every answer (`cors`): null when there are none; unset until the route is known. */
  cors?: CorsAnswer | null | undefined
  /** The RateLimit fields for the response (`rate_limit_headers`): `[name, value, …]`; null or unset for none. */
  rateLimitFields?: string[] | null | undefined
  /** The request's server span, when `tracing` is on. */
  span?: Span | undefined
  /** A refused gRPC call's status (errors/grpc.ts); a forwarded call's is the upstream's (`forwarding`). */
  grpcStatus?: number | undefined
}

/** How the request arrived: each mode runs its own list of stages (src/server/stages.ts). */
export type Mode = 'proxy' | 'decision' | 'upgrade'

/** One request and what the stages learn of it, in their order. */
export interface Exchange extends Outcome {
  readonly rt: GatewayRuntime
  readonly req: IncomingMessage
  /** The response; null for an upgrade, whose answer is written on its socket. */
  readonly res: ServerResponse | null
  readonly mode: Mode
  /**
   * Decision mode: a proxy in front described the request. Its client's address is the last `X-Forwarded-For`
   * entry, and a DPoP proof's `htu` is checked against `server.public_url`.
   */
  readonly described: boolean
  /** The origin-form path, as matched and as forwarded (normalize). */
  path: string
  query: string
  /** The path's segments, split once (normalize): the route match and claim conditions read them. */
  segments: readonly string[]
  /** The matched route (match); no stage before it reads it. */
  rule: CompiledRule
  /**
   * A CORS preflight (match), answered by the cors stage, or forwarded unauthenticated to an upstream that answers
   * CORS itself (`cors.upstream`); one on a `cors: false` route is an ordinary OPTIONS request again.
   */
  preflight: boolean
  /** An MCP message (a POST on an `mcp` route): the route's rules are checked with its tool's, once it is read. */
  mcpMessage: boolean
  /** The token of a `DPoP` request, for its proof (authenticate, then bind). */
  dpopToken: string | undefined
  /** Who the token says is calling (authenticate); undefined without a token where the route allows none. */
  principal: Principal | undefined
  /** The body to forward (body): null when there is none. */
  body: Readable | Buffer | null
  /** The upstream's request headers (forward). */
  headers: HeaderList
  /** The request was answered by a stage before the last (a preflight, a metadata document): stop there. */
  answered: boolean
  /** Its place among the requests waiting for an answer (`server.admission`) until its response head goes out. */
  waiting: Waiting | null
  /** The bytes of its body read into memory, counted in `server.body_memory` until it ends. */
  heldBytes: number
}

/** `rule` before the match: typed as the rule every later stage reads, and never read before it is set. */
const UNMATCHED = undefined as unknown as CompiledRule
const NO_SEGMENTS: readonly string[] = []
/** Replaced by the forward stage's own list. */
const NO_HEADERS: HeaderList = []

/** A new exchange, every field present from the start (one object shape for V8, allocated from one literal). */
export function openExchange(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse | null, mode: Mode): Exchange {
  const decision = mode === 'decision'
  return {
    rt, req, res, mode, described: decision,
    route: '', decision: decision ? 'allowed' : 'forwarded', error: '', detail: undefined, cause: undefined, forwarding: undefined,
    resourceMetadata: undefined, cors: undefined, rateLimitFields: undefined, span: undefined, grpcStatus: undefined,
    path: '', query: '', segments: NO_SEGMENTS, rule: UNMATCHED, preflight: false, mcpMessage: false, dpopToken: undefined,
    principal: undefined, body: null, headers: NO_HEADERS, answered: false, waiting: null, heldBytes: 0,
  }
}

/** A step of the request path: synchronous when it can be (the hot path awaits nothing), a promise otherwise. */
export type Stage = (ex: Exchange) => Promise<void> | undefined

/**
 * Runs `stages` from `from` on: synchronously while each returns undefined, and from the first promise on as its
 * continuation. Stops after a stage that answered the request. Throws, or rejects, with the error to answer.
 */
export function runStages(stages: readonly Stage[], ex: Exchange, from = 0): Promise<void> | undefined {
  for (let i = from; i < stages.length; i++) {
    const pending = stages[i]!(ex)
    if (pending !== undefined) {
      const next = i + 1
      return pending.then(() => ex.answered ? undefined : runStages(stages, ex, next))
    }
    if (ex.answered) return undefined
  }
  return undefined
}
