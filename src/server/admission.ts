/**
 * `server.admission`: load shedding. A request is admitted while fewer than `max_in_flight` are waiting for their
 * answer; past that it is answered 503 `temporarily_unavailable` with `Retry-After` before any stage runs (no route
 * match, no token check, no body read, nothing forwarded), so the excess of an overload costs little more than
 * node's parsing and the requests admitted keep their latency: by Little's law, the wait a request can meet is
 * bounded by how many are ahead of it. A request waits from its admission until its response head goes out (a
 * stream then streams without holding a place: SSE, gRPC streams, downloads) or it closes. Counted per process,
 * over every runtime a reload swaps in; the proxy and decision modes, not the authorization server's endpoints
 * (which have their throttles).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { GatewayConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import type { Waiting } from '../common/waiting.js'
import { TemporarilyUnavailable } from '../errors/oauth-errors.js'
import { isGrpcRequest } from '../errors/grpc.js'
import { errorBody, errorHeaders, renderError } from '../errors/render.js'
import { isHttp2Request } from '../common/http2.js'
import { leavesBodyUnread } from '../forward/request-body.js'
import type { Metrics } from '../metrics/metrics.js'
import type { FastifyBaseLogger } from 'fastify'

/**
 * `server.admission.max_in_flight` by default: above what healthy traffic holds in one process (20,000 requests/s at
 * half a second each), so it never sheds a working deployment, and a bound on memory under a flood; a latency bound
 * is a lower value sized for the deployment (docs/configuration.md, docs/performance.md).
 */
export const DEFAULT_MAX_IN_FLIGHT = 10_000
const DEFAULT_RETRY_AFTER = '1s'
/** At most one warning about shed requests this often (their count is in the metrics, each one). */
const LOG_EVERY_MS = 10_000

/** The process's waiting requests, and what has been shed since the last warning about it. */
export class WaitingRoom implements Waiting {
  count = 0
  private shedSinceLog = 0
  private loggedAt = -Infinity

  /** Counts a shed request; warns at the first, then at most every LOG_EVERY_MS with the count since. */
  noteShed(limit: number, log: FastifyBaseLogger): void {
    this.shedSinceLog++
    const now = Date.now()
    if (now - this.loggedAt < LOG_EVERY_MS) return
    log.warn({ shed: this.shedSinceLog, max_in_flight: limit }, 'overloaded: requests refused 503 (server.admission.max_in_flight)')
    this.shedSinceLog = 0
    this.loggedAt = now
  }
}

/** A runtime's admission limit and its prebuilt answer. */
export interface AdmissionPolicy {
  /** Infinity when off (`max_in_flight: 0`). */
  readonly limit: number
  readonly error: TemporarilyUnavailable
  /** The 503's head and body, as writeHead and end take them: built once, not per refusal. */
  readonly head: readonly string[]
  readonly headClosing: readonly string[]
  readonly body: Buffer
}

export function admissionPolicy(config: GatewayConfig): AdmissionPolicy {
  const settings = config.server?.admission
  const max = settings?.max_in_flight ?? DEFAULT_MAX_IN_FLIGHT
  const retryAfterSeconds = Math.max(1, Math.ceil(parseDuration(settings?.retry_after ?? DEFAULT_RETRY_AFTER) / 1000))
  const error = new TemporarilyUnavailable(`more than ${max} requests waiting for an answer (server.admission.max_in_flight)`, retryAfterSeconds)
  const body = Buffer.from(errorBody(error))
  const head = Object.entries({ ...errorHeaders(error, ''), 'content-length': String(body.length) }).flat()
  return { limit: max === 0 ? Infinity : max, error, head, headClosing: [...head, 'connection', 'close'], body }
}

/** Answers `req` 503 at once, counted in the metrics (`decision="overloaded"`); nothing of it is read or forwarded. */
export function shed(req: IncomingMessage, res: ServerResponse, deps: ShedDeps): void {
  const policy = deps.admission
  deps.waiting.noteShed(policy.limit, deps.log)
  const h2 = isHttp2Request(req)
  deps.metrics.observeRequest(SHED, req.method ?? 'GET', 503, 0, h2 ? 'h2' : 'http1')
  // A body is never read for a refusal: HTTP/1.1 ends the connection with the answer (the prebuilt head says so),
  // HTTP/2 resets the stream; a gRPC call gets UNAVAILABLE (14) in a trailers-only answer, which its client's retry
  // policy knows.
  const unread = leavesBodyUnread(req)
  if (h2) return renderError(res, policy.error, { realm: deps.realm, close: unread, grpc: isGrpcRequest(req) })
  res.writeHead(503, (unread ? policy.headClosing : policy.head) as string[])
  res.end(policy.body)
}

/** What shedding needs of the runtime. */
export interface ShedDeps {
  readonly admission: AdmissionPolicy
  readonly waiting: WaitingRoom
  readonly metrics: Metrics
  readonly log: FastifyBaseLogger
  readonly realm: string
}

const SHED = { route: '', decision: 'overloaded', error: 'temporarily_unavailable' } as const
