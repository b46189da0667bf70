/**
 * The decision mode's own stages (`decision`): the proxy in front describes the request it holds (nginx
 * `auth_request`, Traefik and Caddy forward auth, Envoy `ext_authz`), the proxy mode's stages judge it, and the
 * answer is 200 with the identity headers for the proxy to copy upstream. No body is read.
 */
import { InvalidRequest, MalformedRequest } from '../../errors/oauth-errors.js'
import { setIdentityHeaders, type OutgoingHeaders } from '../../forward/upstream-headers.js'
import { cacheFields } from '../../decision/cache.js'
import { originalRequest } from '../../decision/original.js'
import { requireTrusted, UntrustedCaller } from '../../decision/trust.js'
import type { Exchange } from '../exchange.js'
import { readTarget } from './route.js'
import { requestHeadProblem } from '../request-head.js'
import { authorizeMessage } from '../../mcp/authorize.js'
import { messageFromHeaders } from '../../mcp/message.js'
import { refuseForeignOrigin } from '../../mcp/origin.js'

/** An MCP POST whose headers do not name its message: without the body, nothing says which tool it calls. */
class McpNeedsHeaders extends InvalidRequest {
  constructor(route: string) {
    super('an MCP message is decided here from its Mcp-Method and Mcp-Name headers (MCP 2026-07-28), which this request lacks: use a client that sends them, or serve this route through the proxy mode',
      { detail: `mcp: no Mcp-Method on route ${route}` })
  }
}

/**
 * Describe: the caller must be trusted (`decision.trust`); the request is rewritten in place to the one it
 * describes (method and URL), so every later stage, the DPoP proof check and the log line read that one; then
 * normalized as the proxy mode's.
 */
export function describe(ex: Exchange): undefined {
  const req = ex.req
  const problem = requestHeadProblem(req)
  if (problem) throw problem
  // A reload that removed `decision:` leaves the listener up until a restart: it decides nothing more.
  const decision = ex.rt.decision
  if (decision === null) throw new UntrustedCaller('decision_off')
  requireTrusted(decision.trust, req)
  const original = originalRequest(req)
  req.method = original.method
  req.url = original.url
  // As the proxy mode's upgrades (RFC 6455 §4.1): a WebSocket handshake is a GET, and nothing else is upgraded.
  const upgrade = req.headers.upgrade
  if (upgrade !== undefined && (upgrade.toLowerCase() !== 'websocket' || original.method !== 'GET')) {
    throw new MalformedRequest('only WebSocket upgrades, by GET, are forwarded')
  }
  readTarget(ex, original.url)
  return undefined
}

/**
 * On an `mcp` route, before the token: a foreign `Origin` is refused (MCP: DNS rebinding), as the proxy mode's
 * admit stage does, and a POST is marked an MCP message, whose route scopes are checked with its tool's.
 */
export function mcpRoute(ex: Exchange): undefined {
  const rule = ex.rule
  if (rule.mcp === null) return undefined
  refuseForeignOrigin(rule, ex.req)
  ex.mcpMessage = ex.req.method === 'POST'
  return undefined
}

/**
 * An MCP message, once the token is checked: authorized from what its `Mcp-Method` and `Mcp-Name` headers name
 * (mcp/message.ts), with the route's and the tool's rules, as the proxy mode does with the body. The MCP server
 * must refuse a body that disagrees with those headers (MCP 2026-07-28, Server Validation): the trust this
 * decision relies on (docs/decision.md). Without `Mcp-Method`: 400, saying what to do instead.
 */
export function mcpMessage(ex: Exchange): undefined {
  if (!ex.mcpMessage) return undefined
  const message = messageFromHeaders(ex.req)
  if (message === undefined) throw new McpNeedsHeaders(ex.rule.id)
  authorizeMessage(ex.principal, ex.rule, ex.rule.mcp!, message, { headers: ex.req.headers, segments: ex.segments })
  return undefined
}

/**
 * Answer: 200 with every header the proxy may copy named, empty when the token has no such value (a proxy that
 * copies a header the answer lacks may keep the client's copy, or write its own placeholder text: Caddy 2.6
 * does), the RateLimit fields, and how long the proxy may cache it.
 */
export function answer(ex: Exchange): undefined {
  const { rt, rule, principal } = ex
  const headers: OutgoingHeaders = {}
  const policy = rt.headerPolicy
  if (principal !== undefined) setIdentityHeaders(headers, principal, policy, rule.claimHeaders)
  for (const name of [policy.subject, policy.clientId, policy.scopes, policy.issuer]) headers[name] ??= ''
  if (rule.claimHeaders !== null) for (const header of rule.claimHeaders) headers[header.name] ??= ''
  const byIssuer = principal === undefined ? undefined : policy.issuerClaimHeaders?.get(principal.issuer)
  if (byIssuer !== undefined) for (const header of byIssuer) headers[header.name] ??= ''
  const fields = ex.rateLimitFields
  if (fields !== null && fields !== undefined) for (let i = 0; i < fields.length; i += 2) headers[fields[i]!] = fields[i + 1]!
  cacheFields(rt.decision!, ex, rt.now(), headers)
  headers['content-length'] = '0'
  const res = ex.res!
  res.writeHead(200, headers)
  res.end()
  return undefined
}
