/** The answer to a refused request: the error noted for the log and metrics, then rendered per RFC 6750 §3. */
import { HttpVersionNotSupported } from '../errors/oauth-errors.js'
import { grpcStatusOf, isGrpcRequest } from '../errors/grpc.js'
import { renderError } from '../errors/render.js'
import { refusalCors } from '../cors/response.js'
import { leavesBodyUnread } from '../forward/request-body.js'
import { isHttp2Request } from '../common/http2.js'
import { runStages, type Exchange, type Stage } from './exchange.js'
import { noteFailure } from './request-record.js'
import { tracing } from '../tracing/tracing.js'

export function refuse(ex: Exchange, error: unknown): void {
  const { rt, req } = ex
  const failure = noteFailure(rt, ex, error)
  const res = ex.res!
  // gRPC needs HTTP/2 (gRPC over HTTP2 §Protocol): `application/grpc` over HTTP/1.1 is no call and gets plain HTTP answers.
  const grpc = isHttp2Request(req) && isGrpcRequest(req)
  if (grpc) ex.grpcStatus = grpcStatusOf(failure)
  // A decision's answer never closes the proxy's connection, and carries no CORS: the proxy's client sees the proxy's.
  if (ex.mode === 'decision') return renderError(res, failure, { realm: rt.realm, resource: ex.resourceMetadata })
  // A body we did not read is not read now: the connection closes instead (HTTP/2: the stream is reset); and a
  // client that spoke another HTTP version gets nothing more on this one.
  const unread = leavesBodyUnread(req)
  renderError(res, failure, {
    realm: rt.realm,
    close: unread || failure instanceof HttpVersionNotSupported,
    resource: ex.resourceMetadata,
    cors: rt.cors === null ? undefined : refusalCors(rt.cors, req, ex.cors),
    grpc,
  })
}

/** How a list runs: runStages, or a mode's list written out (stages.ts runProxy). */
export type Runner = (stages: readonly Stage[], ex: Exchange) => Promise<void> | undefined

/**
 * Runs `stages` on `ex` (with `run`); a refusal, thrown or rejected later, is answered. With `tracing` on, inside the
 * request's server span (continuing the caller's `traceparent`; a decision's marked `portcullis.mode: decision`),
 * under which the stages' own spans go; off, one test of a module variable is all it costs.
 */
export function serveStages(stages: readonly Stage[], ex: Exchange, run: Runner = runStages): void {
  const tracer = tracing()
  if (tracer === null) return runAndRefuse(stages, ex, run)
  const { span, context } = tracer.startRequest(ex.req)
  if (ex.described) span.setAttribute('portcullis.mode', 'decision')
  ex.span = span
  tracer.within(context, () => runAndRefuse(stages, ex, run))
}

function runAndRefuse(stages: readonly Stage[], ex: Exchange, run: Runner): void {
  try {
    run(stages, ex)?.catch((error: unknown) => refuse(ex, error))
  } catch (error) {
    refuse(ex, error)
  }
}
