/**
 * What one request did (its route, decision and error), and the log line and metrics written when it ends:
 * the same for a forwarded request (pipeline.ts) and a decision (decision.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { randomUUID } from 'node:crypto'
// The module's binding: the global `performance` is a getter, run on every use.
import { performance } from 'node:perf_hooks'
import {
  ClaimsNotSatisfied, BadGateway, GatewayError, GatewayTimeout, InsufficientScope, MissingToken, RateLimited, ServerError, TemporarilyUnavailable,
} from '../errors/oauth-errors.js'
import type { Decision } from '../metrics/metrics.js'
import { endHttpSpan, type Span } from '../tracing/tracing.js'
import { isGrpcRequest } from '../errors/grpc.js'
import { leaveWaiting } from '../common/waiting.js'
import { openExchange, type Exchange, type Mode, type Outcome } from './exchange.js'
import type { GatewayRuntime } from './runtime.js'
import type { RequestLine } from './log-output.js'


/** Levels at which the one-line-per-request log is written (`info` and chattier). */
const LOGS_REQUESTS = new Set(['info', 'debug', 'trace'])

/** Honoured when a load balancer or client sends one we can safely log and echo; generated otherwise. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function decisionOf(failure: GatewayError): Decision {
  if (failure.challenge || failure instanceof MissingToken || failure instanceof ClaimsNotSatisfied) return 'denied'
  if (failure instanceof RateLimited) return 'limited'
  if (failure instanceof TemporarilyUnavailable) return 'unavailable'
  if (failure instanceof BadGateway || failure instanceof GatewayTimeout) return 'upstream_error'
  if (failure.status >= 500) return 'error'
  return 'rejected'
}

/**
 * A request on `rt` from now until its response closes: counted in flight (a replaced runtime closes what it
 * alone holds once its last one ends), then recorded (its log line and metrics); an upstream request still in
 * flight is told when the client goes away.
 */
export function beginRequest(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, mode: Mode): Exchange {
  const started = performance.now()
  const ex = openExchange(rt, req, res, mode)
  rt.inflight++
  // Admitted (pipeline.ts): waiting for its answer until the response head goes out (forward) or it closes.
  const waiting = rt.waiting
  waiting.count++
  ex.waiting = waiting
  // 'close' comes once, when the response has ended or the connection went away ('on': no once-wrapper).
  res.on('close', () => {
    ex.forwarding?.clientClosed()
    leaveWaiting(ex)
    if (ex.heldBytes !== 0) rt.bodyPolicy.memory.release(ex)
    if (--rt.inflight === 0) rt.onIdle?.()
    recordRequest(rt, req, res, ex, (performance.now() - started) / 1000)
  })
  return ex
}

/** One log line and the metrics of a finished request. */
export function recordRequest(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, seconds: number): void {
  // Not finished: the client went away before the response was complete.
  const status = res.writableFinished ? res.statusCode : 499
  // gRPC needs HTTP/2: an HTTP/1.1 request pays one comparison here.
  const h2 = req.httpVersionMajor === 2
  const grpc = h2 && isGrpcRequest(req)
  const grpcStatus = grpc ? outcome.grpcStatus ?? outcome.forwarding?.grpcStatus : undefined
  rt.metrics.observeRequest(outcome, req.method ?? 'GET', status, seconds, h2 ? 'h2' : 'http1')
  if (grpc) rt.metrics.observeGrpcCall(outcome.route, grpcStatus)
  const span = outcome.span
  // Read before the span ends: an ended span no longer says it is recording.
  const traced = span !== undefined && span.isRecording() ? span.spanContext() : undefined
  if (span !== undefined) {
    span.setAttribute('portcullis.decision', outcome.decision)
    if (h2) span.setAttribute('network.protocol.version', '2')
    if (grpc) setRpcAttributes(span, req.url ?? '', grpcStatus)
    if (outcome.error !== '') span.setAttribute('error.type', outcome.error)
    endHttpSpan(span, status)
  }
  if (!LOGS_REQUESTS.has(rt.log.level)) return
  // The request id names the log line only: one of our own is made as the line is written (log-output.ts).
  const presented = req.headers['x-request-id']
  const id = typeof presented === 'string' && REQUEST_ID.test(presented) ? presented : undefined
  const url = req.url ?? ''
  const q = url.indexOf('?')
  // The path only: a query may carry a token (refused, but never logged).
  const path = (q === -1 ? url : url.slice(0, q)).slice(0, 512)
  const entry: RequestLine = {
    reqId: id, route: outcome.route || undefined, method: req.method, path, status, decision: outcome.decision,
    error: undefined, reason: undefined, ms: Math.round(seconds * 100_000) / 100, trace_id: undefined, span_id: undefined,
    protocol: undefined, grpc_method: undefined, grpc_status: undefined,
  }
  if (h2) {
    entry.protocol = 'h2'
    if (grpc) {
      entry.grpc_method = path
      entry.grpc_status = grpcStatus
    }
  }
  if (outcome.error !== '') {
    entry.error = outcome.error
    entry.reason = outcome.detail
  }
  if (traced !== undefined) {
    entry.trace_id = traced.traceId
    entry.span_id = traced.spanId
  }
  // The line of (nearly) every request: written as bytes, and out with the others of this turn (log-output.ts).
  if (outcome.error === '') rt.requestLog.write(entry, 'request')
  else if (status < 500) rt.requestLog.write(entry, 'request denied')
  // Our own failure, through pino with its stack: an id of its own made here when the request brought none.
  else rt.log.error({ ...entry, reqId: entry.reqId ?? randomUUID(), err: outcome.cause }, 'request failed')
}

/** OpenTelemetry's RPC conventions for a gRPC call: `rpc.service`, `rpc.method` from `/package.Service/Method`. */
function setRpcAttributes(span: Span, url: string, grpcStatus: number | undefined): void {
  const q = url.indexOf('?')
  const [, service = '', method = ''] = (q === -1 ? url : url.slice(0, q)).split('/')
  span.setAttribute('rpc.system', 'grpc')
  span.setAttribute('rpc.service', service)
  span.setAttribute('rpc.method', method)
  if (grpcStatus !== undefined) span.setAttribute('rpc.grpc.status_code', grpcStatus)
}

/** The error to answer for `error` (a 500 for anything not ours), noted in `outcome` and in the denial metrics. */
export function noteFailure(rt: GatewayRuntime, outcome: Outcome, error: unknown): GatewayError {
  const failure = error instanceof GatewayError ? error : new ServerError(error)
  outcome.decision = decisionOf(failure)
  outcome.error = failure.code
  outcome.detail = failure.internal.detail ?? failure.description
  outcome.cause = failure.internal.cause
  if (failure instanceof ClaimsNotSatisfied || failure instanceof InsufficientScope) rt.metrics.observeDenial(outcome.route, failure.condition)
  return failure
}
