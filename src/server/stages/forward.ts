/** The last stages of a proxied request: its body, then the upstream (or the built-in echo). */
import { performance } from 'node:perf_hooks'
import type { IncomingMessage } from 'node:http'
import { MalformedRequest, type GatewayError } from '../../errors/oauth-errors.js'
import { echoRequest } from '../../forward/echo.js'
import { ClientGone, forwardRequest, upstreamFailure, type Upstream } from '../../forward/proxy.js'
import { hasBody, requestBody } from '../../forward/request-body.js'
import { buildUpstreamHeaders, setInList, type HeaderList } from '../../forward/upstream-headers.js'
import { authorizedMcpBody } from '../../mcp/request.js'
import { endHttpSpan, SpanKind, tracing, type Span } from '../../tracing/tracing.js'
import { responseGone } from '../../common/http2.js'
import type { Exchange } from '../exchange.js'
import { refuse } from '../refuse.js'

/**
 * Body: read after the request is authorized and counted (a refused request costs no body). An MCP message is
 * read whole and authorized with its tool's rules (src/mcp/); any other body streams on, watched for size and pace.
 */
export function body(ex: Exchange): Promise<void> | undefined {
  const req = ex.req
  const res = ex.res!
  if (ex.mcpMessage) {
    return authorizedMcpBody(res, ex, ex.rule.mcp!, ex.rt.bodyPolicy).then((read) => { ex.body = read })
  }
  if (!hasBody(req)) return undefined
  // RFC 9110 §10.1.1: the server's 'checkContinue' sends no 100 by itself; the client is told to send its body
  // only now that the request is authorized (a refusal is answered instead, and the body never read).
  if (req.headers.expect !== undefined) res.writeContinue()
  const multiplexed = ex.rt.upstreams.get(ex.rule.upstream)?.http2 === true
  return requestBody(req, ex.rule, ex.rt.bodyPolicy, ex, multiplexed).then((read) => { ex.body = read })
}

/** The client span of the upstream request; its context goes upstream in `traceparent`. */
function startUpstreamSpan(req: IncomingMessage, upstream: Upstream, headers: HeaderList): Span {
  const tracer = tracing()!
  const { span, context } = tracer.startChild(req.method ?? 'HTTP', SpanKind.CLIENT, {
    'http.request.method': req.method ?? '_OTHER',
    'portcullis.upstream': upstream.name,
  })
  // Ours replace any the client sent.
  const carrier: Record<string, string> = {}
  tracer.inject(context, carrier)
  for (const name in carrier) setInList(headers, name, carrier[name]!)
  return span
}

/** Why a forwarded request ended without its response relayed, as the error the client (or the log) gets. */
function forwardingFailure(error: Error, req: IncomingMessage, upstream: Upstream): GatewayError {
  // The client went away (mid-body, or before the answer was relayed): the upstream request was aborted
  // for it, not failed by the upstream.
  if (req.destroyed && !req.complete) return new MalformedRequest('the request body ended early', { detail: 'client_aborted', cause: error })
  if (error instanceof ClientGone) return new MalformedRequest('the client went away before the response was complete', { detail: 'client_aborted', cause: error })
  return upstreamFailure(error, upstream.name)
}

/** The upstream's request headers: the client's, cleaned by the route's header policy, then ours from the token. */
export function upstreamHeaders(ex: Exchange): HeaderList {
  const { rt, rule } = ex
  return buildUpstreamHeaders(ex.req, ex.principal, rule.stripAuthorization ? rt.tokenlessHeaderPolicy : rt.headerPolicy, rule.claimHeaders)
}

/**
 * Forward: the client's headers without hop-by-hop, spoofed identity and forwarding headers, then ours from the
 * token (`forward`); sent on the upstream's pool, the answer streamed back. Returns at once: the relay ends the
 * request, or refuses it when the upstream fails.
 */
export function forward(ex: Exchange): Promise<void> | undefined {
  const { rt, req } = ex
  const res = ex.res!
  const headers = upstreamHeaders(ex)
  ex.headers = headers
  const upstream = rt.upstreams.get(ex.rule.upstream)!
  // RFC 9113 §8.2.2: `TE: trailers` is the one TE an HTTP/2 request carries (gRPC requires it); hop-by-hop otherwise.
  if (upstream.http2 && req.headers.te !== undefined && /(?:^|,)\s*trailers\s*(?:[,;]|$)/i.test(String(req.headers.te))) headers.push('te', 'trailers')
  if (upstream.echo) return echoRequest(res, ex)
  // Gone while its token was validated or its body read: nothing to send, and no upstream connection to
  // spend (undici's abort would close the one it had picked).
  if (responseGone(res)) throw forwardingFailure(new ClientGone(), req, upstream)
  const sent = performance.now()
  let upstreamSpan: Span | undefined
  if (ex.span !== undefined) {
    // The subject only where the config asks for it (`tracing.attributes.subject`).
    if (ex.principal?.subject !== undefined && tracing()?.withSubject) ex.span.setAttribute('enduser.id', ex.principal.subject)
    upstreamSpan = startUpstreamSpan(req, upstream, headers)
  }
  ex.forwarding = forwardRequest(upstream, res, ex, (error) => {
    rt.metrics.observeUpstream(upstream.name, error ? 'failure' : 'response', (performance.now() - sent) / 1000)
    if (upstreamSpan !== undefined) endHttpSpan(upstreamSpan, error ? 502 : res.statusCode, false)
    if (error) refuse(ex, forwardingFailure(error, req, upstream))
  })
  return undefined
}
