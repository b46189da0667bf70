/**
 * The decision endpoint (issue 23): the proxy a team already runs (nginx `auth_request`, ingress-nginx
 * `auth-url`, Traefik and Caddy forward auth, Envoy `ext_authz`) asks, per request, whether to forward it.
 * The same stages as the proxy mode: path hygiene, the route match, the token, scopes, claim rules and rate
 * limits. Allowed: 200 with the identity headers (empty where the token has no value), for the proxy to copy upstream, and how long the proxy may
 * cache that answer. Refused: the status, challenge and body the proxy mode would answer, never cacheable.
 * No body is read.
 */
import { performance } from 'node:perf_hooks'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Principal } from '../common/principal.js'
import { authorize } from '../authz/scopes.js'
import { GatewayError, MalformedRequest } from '../errors/oauth-errors.js'
import { renderError } from '../errors/render.js'
import { setIdentityHeaders, type OutgoingHeaders } from '../forward/upstream-headers.js'
import type { RateLimitFields } from '../ratelimit/limiter.js'
import type { CompiledRule } from '../rules/compile.js'
import { splitRequestTarget } from '../rules/normalize.js'
import { splitPath } from '../rules/segments.js'
import { authenticate, matchOrThrow } from './authenticate.js'
import { noteFailure, recordRequest, type Outcome } from './request-record.js'
import { requestHeadProblem } from './request-head.js'
import { hasBody } from '../forward/request-body.js'
import type { GatewayRuntime } from './runtime.js'
import { originalRequest } from '../decision/original.js'
import type { CompiledDecision } from '../decision/settings.js'
import { requireTrusted, UntrustedCaller } from '../decision/trust.js'

/** A route whose rules read the request body (`mcp`): the decision endpoint never gets one, so it cannot allow its POSTs. */
class NotDecidable extends GatewayError {
  readonly code = 'server_error'
  readonly status = 500
  constructor(route: string) {
    super('this request cannot be decided without its body', { detail: `route ${route} authorizes MCP messages: serve it through the proxy mode` })
  }
}

/**
 * How long the proxy may keep this allowed decision: `decision.cache_ttl`, never past the token's `exp`;
 * nothing where the decision depends on more than the proxy's cache key (token, method, URI): a DPoP-bound
 * token (a proof is good for one request), a route with rate limits (each request counts) or with conditions
 * on request headers. Two fields say it: `Cache-Control: s-maxage` (RFC 9111 §3.5: a shared cache may reuse an
 * answer to a request with `Authorization` only with it), and nginx's `X-Accel-Expires: @<epoch second>`,
 * because nginx keeps a cached answer through the whole second it expires in (s-maxage=1 was measured keeping
 * a revoked token's decision 1.95 s): the last second named is the one that ends within the bound.
 */
export function cacheFields(decision: CompiledDecision, rule: CompiledRule, principal: Principal | undefined, nowMs: number,
  out: OutgoingHeaders): void {
  if (decision.cacheSeconds === 0 || decision.uncacheable.has(rule.id) || principal?.jkt !== undefined) {
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

export class DecisionEndpoint {
  constructor(private readonly source: { readonly runtime: GatewayRuntime }, private readonly now: () => number) {}

  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const rt = this.source.runtime
    const started = performance.now()
    const outcome: Outcome = { route: '', decision: 'allowed', error: '' }
    rt.inflight++
    // A decision reads no body: one that comes anyway is not read either, and the connection ends with the answer.
    if (hasBody(req)) res.shouldKeepAlive = false
    res.on('close', () => {
      if (--rt.inflight === 0) rt.onIdle?.()
      recordRequest(rt, req, res, outcome, (performance.now() - started) / 1000)
    })
    try {
      this.decide(rt, req, res, outcome)?.catch((error: unknown) => this.refuse(rt, res, error, outcome))
    } catch (error) {
      this.refuse(rt, res, error, outcome)
    }
  }

  /**
   * Trust, then the described request, then the proxy mode's stages. The request is rewritten in place to the
   * one it describes (method and URL), so every stage, the DPoP proof check and the log line read that one.
   */
  private decide(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, outcome: Outcome): Promise<void> | undefined {
    const problem = requestHeadProblem(req)
    if (problem) throw problem
    // A reload that removed `decision:` leaves the listener up until a restart: it decides nothing more.
    if (rt.decision === null) throw new UntrustedCaller('decision_off')
    const decision = rt.decision
    requireTrusted(decision.trust, req)
    const original = originalRequest(req)
    req.method = original.method
    req.url = original.url
    // As the proxy mode's upgrades (RFC 6455 §4.1): a WebSocket handshake is a GET, and nothing else is upgraded.
    const upgrade = req.headers.upgrade
    if (upgrade !== undefined && (upgrade.toLowerCase() !== 'websocket' || original.method !== 'GET')) {
      throw new MalformedRequest('only WebSocket upgrades, by GET, are forwarded')
    }
    const { path, query } = splitRequestTarget(original.url)
    const segments = splitPath(path)
    const rule = matchOrThrow(rt.rules, original.method, path, segments)
    outcome.route = rule.id
    if (rule.challenge !== null) outcome.resourceMetadata = rule.challenge
    if (rule.mcp !== null && original.method === 'POST') throw new NotDecidable(rule.id)
    const found = authenticate(rt, req, rule, path, query, segments, authorize, true)
    if (found instanceof Promise) return found.then((principal) => this.limit(rt, req, res, rule, decision, principal))
    return this.limit(rt, req, res, rule, decision, found)
  }

  private limit(rt: GatewayRuntime, req: IncomingMessage, res: ServerResponse, rule: CompiledRule, decision: CompiledDecision,
    principal: Principal | undefined): Promise<void> | undefined {
    if (rule.rateLimits === null) return this.allow(rt, res, rule, decision, principal, null)
    // The client's address is what the trusted proxy says (the last X-Forwarded-For entry).
    const fields = rt.rateLimiter!.check(rule.id, rule.rateLimits, rule.rateLimitHeaders, req, principal, true)
    if (fields instanceof Promise) return fields.then((shared) => this.allow(rt, res, rule, decision, principal, shared))
    return this.allow(rt, res, rule, decision, principal, fields)
  }

  private allow(rt: GatewayRuntime, res: ServerResponse, rule: CompiledRule, decision: CompiledDecision, principal: Principal | undefined,
    fields: RateLimitFields): undefined {
    const headers: OutgoingHeaders = {}
    const policy = rt.headerPolicy
    if (principal !== undefined) setIdentityHeaders(headers, principal, policy, rule.claimHeaders)
    // Every header the proxy may copy is named, empty when the token has no such value: a proxy that copies a
    // header the answer lacks may keep the client's copy, or write its own placeholder text (Caddy 2.6 does).
    for (const name of [policy.subject, policy.clientId, policy.scopes, policy.issuer]) headers[name] ??= ''
    if (rule.claimHeaders !== null) for (const header of rule.claimHeaders) headers[header.name] ??= ''
    const byIssuer = principal === undefined ? undefined : policy.issuerClaimHeaders?.get(principal.issuer)
    if (byIssuer !== undefined) for (const header of byIssuer) headers[header.name] ??= ''
    if (fields !== null) for (let i = 0; i < fields.length; i += 2) headers[fields[i]!] = fields[i + 1]!
    cacheFields(decision, rule, principal, this.now(), headers)
    headers['content-length'] = '0'
    res.writeHead(200, headers)
    res.end()
    return undefined
  }

  private refuse(rt: GatewayRuntime, res: ServerResponse, error: unknown, outcome: Outcome): void {
    const failure = noteFailure(rt, outcome, error)
    renderError(res, failure, rt.realm, false, outcome.resourceMetadata)
  }
}
