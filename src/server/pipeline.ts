/**
 * The request path, top to bottom: normalize → match → authenticate → authorize → forward
 * (ARCHITECTURE "Request path"). Runs on the raw node:http request so the hot path pays for nothing
 * it does not use; the authorization server and admin routes stay fastify routes.
 */
// The module's binding: the global `performance` is a getter, run on every use (issue 24).
import { performance } from 'node:perf_hooks'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import type { Principal } from '../common/principal.js'
import { requireAudience } from '../authz/scopes.js'
import {
  BadGateway, GatewayError, HttpVersionNotSupported, MalformedRequest, RequestTooLarge, ServerError,
} from '../errors/oauth-errors.js'
import { renderError, renderErrorOnSocket, type ResourceChallenge } from '../errors/render.js'
import { endHttpSpan, SpanKind, tracing, type Span } from '../tracing/tracing.js'
import { echoRequest } from '../forward/echo.js'
import { ClientGone, forwardRequest, upstreamFailure, type Upstream } from '../forward/proxy.js'
import { buildUpstreamHeaders, setInList, type HeaderList } from '../forward/upstream-headers.js'
import type { CompiledRule } from '../rules/compile.js'
import { splitPath } from '../rules/segments.js'
import { splitRequestTarget } from '../rules/normalize.js'
import { hasBody, requestBody } from '../forward/request-body.js'
import { authorizedMcpBody } from '../mcp/request.js'
import { refuseForeignOrigin } from '../mcp/origin.js'
import type { CompiledMcp } from '../mcp/compile.js'
import { corsAnswer } from '../cors/policy.js'
import { answerPreflight, isPreflight } from '../cors/preflight.js'
import { refusalCors } from '../cors/response.js'
import { serveResourceMetadata } from './resource-metadata.js'
import { requestHeadProblem } from './request-head.js'
import { retireWhenIdle, type GatewayRuntime } from './runtime.js'
import { authenticate, matchOrThrow, nameSpan } from './authenticate.js'
import { noteFailure, recordRequest, type Outcome } from './request-record.js'

export type { GatewayRuntime } from './runtime.js'

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

export class GatewayPipeline {
  private readonly upgraded = new Set<Duplex>()

  constructor(private rt: GatewayRuntime) {}

  /** The runtime new requests use. */
  get runtime(): GatewayRuntime {
    return this.rt
  }

  /**
   * Puts `next` in service for every request that starts from now on; the requests in flight finish on
   * the old one, which then closes what `next` does not reuse.
   */
  swap(next: GatewayRuntime): void {
    const previous = this.rt
    this.rt = next
    retireWhenIdle(previous, next)
  }

  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const rt = this.rt
    const started = performance.now()
    const outcome: Outcome = { route: '', decision: 'forwarded', error: '' }
    rt.inflight++
    // 'close' comes once, when the response has ended or the connection went away ('on': no once-wrapper).
    res.on('close', () => {
      outcome.forwarding?.clientClosed()
      if (--rt.inflight === 0) rt.onIdle?.()
      recordRequest(rt, req, res, outcome, (performance.now() - started) / 1000)
    })
    // Tracing (issue 22): off, this test is all it costs.
    const tracer = tracing()
    if (tracer !== null) {
      const { span, context } = tracer.startRequest(req)
      outcome.span = span
      tracer.within(context, () => this.serveAndCatch(rt, req, res, outcome))
      return
    }
    this.serveAndCatch(rt, req, res, outcome)
  }

  private serveAndCatch(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome): void {
    try {
      this.serve(rt, req, res, outcome)?.catch((error: unknown) => this.fail(rt, req, res, error, outcome))
    } catch (error) {
      this.fail(rt, req, res, error, outcome)
    }
  }

  /**
   * Match, authenticate, authorize, forward. Synchronous up to the upstream request when the token was a
   * verified-JWT cache hit and there is no body (the hot path: no promise at all); a promise otherwise.
   * Throws or rejects with the error to answer.
   */
  private serve(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome): Promise<void> | undefined {
    const problem = requestHeadProblem(req)
    if (problem) throw problem
    const { path, query } = splitRequestTarget(req.url ?? '')
    if (rt.resourceMetadata !== null && serveResourceMetadata(rt.resourceMetadata, req, res, path)) {
      outcome.route = '(resource-metadata)'
      return undefined
    }
    const segments = splitPath(path)
    // CORS (issue 18), only where configured: this comparison is all it costs otherwise.
    if (rt.cors !== null) return this.serveCors(rt, req, res, outcome, path, query, segments)
    return this.serveRoute(rt, req, res, outcome, matchOrThrow(rt.rules, req.method ?? 'GET', path, segments), path, query, segments)
  }

  /** `serve` once the route is known. */
  private serveRoute(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, rule: CompiledRule,
    path: string, query: string, segments: readonly string[]): Promise<void> | undefined {
    outcome.route = rule.id
    if (outcome.span !== undefined) nameSpan(outcome.span, req, rule)
    if (rule.challenge !== null) outcome.resourceMetadata = rule.challenge
    // A declared length over the limit costs nothing to refuse: before the token is even looked at.
    if (Number(req.headers['content-length']) > rule.maxBodySize) throw new RequestTooLarge(rule.maxBodySize)
    if (rule.mcp !== null) {
      refuseForeignOrigin(rule, req)
      if (req.method === 'POST' || hasBody(req)) return this.serveMcp(rt, req, res, outcome, rule, rule.mcp, path, query, segments)
    }
    const found = authenticate(rt, req, rule, path, query, segments)
    if (found instanceof Promise || hasBody(req)) return this.serveLater(rt, req, res, outcome, rule, path, query, found)
    // Rate limits (issue 21), after authentication: in memory this stays synchronous.
    if (rule.rateLimits !== null) {
      const fields = rt.rateLimiter!.check(rule.id, rule.rateLimits, rule.rateLimitHeaders, req, found)
      if (fields instanceof Promise) return fields.then((shared) => { outcome.rateLimitFields = shared; return this.forward(rt, req, res, outcome, rule, path, query, found, null) })
      outcome.rateLimitFields = fields
    }
    return this.forward(rt, req, res, outcome, rule, path, query, found, null)
  }

  /**
   * `serve` where CORS is configured (src/cors/): a preflight is answered for the route of the request it announces,
   * before authentication; forwarded (unauthenticated) to an `upstream: true` route only; an ordinary OPTIONS under
   * `cors: false`. Other requests get their CORS headers from their route, whatever answers them.
   */
  private serveCors(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, path: string, query: string,
    segments: readonly string[]): Promise<void> | undefined {
    const origin = req.headers.origin
    if (origin !== undefined && isPreflight(req)) {
      outcome.cors = null
      const target = matchOrThrow(rt.rules, req.headers['access-control-request-method'] as string, path, segments)
      outcome.route = target.id
      if (target.cors?.upstream) return this.serveLater(rt, req, res, outcome, target, path, query, undefined)
      if (target.cors !== null) return answerPreflight(target.cors, req, res, origin)
    }
    const rule = matchOrThrow(rt.rules, req.method ?? 'GET', path, segments)
    if (origin !== undefined && outcome.cors === undefined) outcome.cors = corsAnswer(rule.cors, origin, req.method)
    return this.serveRoute(rt, req, res, outcome, rule, path, query, segments)
  }

  /**
   * `serveRoute` for a POST (or any request with a body) on an MCP route (issue 19, src/mcp/): the token is
   * validated (and its audience checked), then the JSON-RPC message read and authorized with the route's
   * rules and its tool's at once.
   */
  private async serveMcp(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, rule: CompiledRule,
    mcp: CompiledMcp, path: string, query: string, segments: readonly string[]): Promise<void> {
    const principal = await authenticate(rt, req, rule, path, query, segments, requireAudience)
    if (rule.rateLimits !== null) outcome.rateLimitFields = await rt.rateLimiter!.check(rule.id, rule.rateLimits, rule.rateLimitHeaders, req, principal)
    const body = await authorizedMcpBody(req, res, rule, mcp, principal, rt.bodyPolicy, segments)
    return this.forward(rt, req, res, outcome, rule, path, query, principal, body)
  }

  /** The rest of `serve` once the token has been validated and the body sized up. */
  private async serveLater(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, rule: CompiledRule,
    path: string, query: string, found: Principal | undefined | Promise<Principal>): Promise<void> {
    const principal = found instanceof Promise ? await found : found
    // Before the body is read: a request over its limit costs no body.
    if (rule.rateLimits !== null) outcome.rateLimitFields = await rt.rateLimiter!.check(rule.id, rule.rateLimits, rule.rateLimitHeaders, req, principal)
    let body: Readable | Buffer | null = null
    if (hasBody(req)) {
      // RFC 9110 §10.1.1: the server's 'checkContinue' sends no 100 by itself; the client is told to send its
      // body only now that the request is authorized (a refusal is answered instead, and the body never read).
      if (req.headers.expect !== undefined) res.writeContinue()
      body = await requestBody(req, rule, rt.bodyPolicy)
    }
    return this.forward(rt, req, res, outcome, rule, path, query, principal, body)
  }

  private forward(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome, rule: CompiledRule,
    path: string, query: string, principal: Principal | undefined, body: Readable | Buffer | null): Promise<void> | undefined {
    const headers = buildUpstreamHeaders(req, principal, rule.stripAuthorization ? rt.tokenlessHeaderPolicy : rt.headerPolicy, rule.claimHeaders)
    const upstream = rt.upstreams.get(rule.upstream)!
    if (upstream.echo) return echoRequest(req, res, path, query, headers, body, outcome.cors, outcome.rateLimitFields ?? null)
    // Gone while its token was validated or its body read: nothing to send, and no upstream connection to
    // spend (undici's abort would close the one it had picked).
    if (res.destroyed) throw forwardingFailure(new ClientGone(), req, upstream)
    const sent = performance.now()
    let upstreamSpan: Span | undefined
    if (outcome.span !== undefined) {
      // The subject only where the config asks for it (`tracing.attributes.subject`).
      if (principal?.subject !== undefined && tracing()?.withSubject) outcome.span.setAttribute('enduser.id', principal.subject)
      upstreamSpan = startUpstreamSpan(req, upstream, headers)
    }
    outcome.forwarding = forwardRequest(upstream, req, res, headers, body, (error) => {
      rt.metrics.observeUpstream(upstream.name, error ? 'failure' : 'response', (performance.now() - sent) / 1000)
      if (upstreamSpan !== undefined) endHttpSpan(upstreamSpan, error ? 502 : res.statusCode, false)
      if (error) this.fail(rt, req, res, forwardingFailure(error, req, upstream), outcome)
    }, outcome.cors, outcome.rateLimitFields ?? null)
    return undefined
  }

  private fail(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, error: unknown, outcome: Outcome): void {
    const failure = noteFailure(rt, outcome, error)
    // A body we did not read must not be read now (it may be 50 MB): close the connection instead; and a
    // client that spoke another HTTP version gets nothing more on this one.
    renderError(res, failure, rt.realm, (hasBody(req) && !req.readableEnded) || failure instanceof HttpVersionNotSupported,
      outcome.resourceMetadata, rt.cors === null ? undefined : refusalCors(rt.cors, req, outcome.cors))
  }

  private logUpgradeFailure(rt: GatewayRuntime, req: IncomingMessage, failure: GatewayError): void {
    const entry = { method: req.method, status: failure.status, error: failure.code, reason: failure.internal.detail ?? failure.description }
    if (failure.status >= 500) rt.log.error({ ...entry, err: failure.internal.cause }, 'upgrade failed')
    else rt.log.info(entry, 'upgrade denied')
  }

  /** WebSocket upgrades: forwarded only after the same route match and token validation. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    socket.on('error', () => socket.destroy())
    const rt = this.rt
    const found: { resourceMetadata?: ResourceChallenge } = {}
    this.upgrade(rt, req, socket, head, found).catch((error: unknown) => {
      const failure = error instanceof GatewayError ? error : new ServerError(error)
      this.logUpgradeFailure(rt, req, failure)
      renderErrorOnSocket(socket, failure, rt.realm, found.resourceMetadata)
    })
  }

  private async upgrade(rt: GatewayRuntime, req: IncomingMessage, socket: Duplex, head: Buffer,
    found: { resourceMetadata?: ResourceChallenge }): Promise<void> {
    if (req.headers.upgrade?.toLowerCase() !== 'websocket') throw new MalformedRequest('only WebSocket upgrades are forwarded')
    // RFC 6455 §4.1: the opening handshake is a GET over HTTP/1.1 or later. Forwarded as anything else, an
    // OPTIONS or POST upgrade would match that method's (perhaps anonymous) route and reach the GET one's.
    const problem = requestHeadProblem(req)
    if (problem) throw problem
    if (req.method !== 'GET') throw new MalformedRequest('a WebSocket upgrade must be a GET request')
    if (req.httpVersionMajor === 1 && req.httpVersionMinor === 0) throw new MalformedRequest('a WebSocket upgrade needs HTTP/1.1')
    const { path, query } = splitRequestTarget(req.url ?? '')
    const segments = splitPath(path)
    const rule = matchOrThrow(rt.rules, 'GET', path, segments)
    if (rule.challenge !== null) found.resourceMetadata = rule.challenge
    const principal = await authenticate(rt, req, rule, path, query, segments)
    if (rule.rateLimits !== null) await rt.rateLimiter!.check(rule.id, rule.rateLimits, false, req, principal)
    const headers = buildUpstreamHeaders(req, principal, rule.stripAuthorization ? rt.tokenlessHeaderPolicy : rt.headerPolicy, rule.claimHeaders)
    const upstream = rt.upstreams.get(rule.upstream)!
    if (!upstream.pool) throw new BadGateway(`upstream ${upstream.name} does not accept WebSocket upgrades`)
    let upgraded
    try {
      upgraded = await upstream.pool.upgrade({ path: req.url!, method: 'GET', headers, protocol: 'websocket' })
    } catch (error) {
      throw upstreamFailure(error, upstream.name)
    }
    const upstreamSocket = upgraded.socket
    if (socket.destroyed) { upstreamSocket.destroy(); return }
    let head101 = 'HTTP/1.1 101 Switching Protocols\r\n'
    for (const [name, value] of Object.entries(upgraded.headers)) {
      for (const item of Array.isArray(value) ? value : [value]) if (item !== undefined) head101 += `${name}: ${item}\r\n`
    }
    socket.write(head101 + '\r\n')
    if (head.length > 0) upstreamSocket.write(head)
    this.upgraded.add(socket)
    const close = () => {
      this.upgraded.delete(socket)
      socket.destroy()
      upstreamSocket.destroy()
    }
    upstreamSocket.on('error', close).on('close', close)
    socket.on('close', close)
    upstreamSocket.pipe(socket)
    socket.pipe(upstreamSocket)
  }

  /** Upgraded sockets are not the HTTP server's any more: close them ourselves on shutdown. */
  closeUpgraded(): void {
    for (const socket of this.upgraded) socket.destroy()
    this.upgraded.clear()
  }
}
