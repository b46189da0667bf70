/**
 * A POST on an MCP route (`mcp`), once its token is validated: the message read whole (bounded), checked
 * against its headers, authorized with the route's rules and its tool's, and returned to be forwarded as read.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Principal } from '../common/principal.js'
import { MalformedRequest } from '../errors/oauth-errors.js'
import type { RouteAccess } from '../authz/scopes.js'
import type { BodyPolicy } from '../forward/body-watch.js'
import { hasBody, readWholeBody } from '../forward/request-body.js'
import { authorizeMessage } from './authorize.js'
import type { CompiledMcp } from './compile.js'
import { readMessage } from './message.js'

/** What authorizing a message reads of its request. */
export interface McpRequest {
  readonly req: IncomingMessage
  readonly rule: RouteAccess & { readonly maxBodySize: number }
  /** Undefined where the route's `auth` lets a request without a token through. */
  readonly principal: Principal | undefined
  /** The path's segments, for claim conditions on its parameters. */
  readonly segments: readonly string[]
  /** What the exchange holds of `server.body_memory`. */
  heldBytes: number
}

/**
 * The body to forward, or the error to answer: 400 (no message, a body not on a POST, or a message the
 * gateway cannot read one way only),
 * 413 (larger than `server.body_buffer_size` or the route's `max_body_size`: never streamed unread), 401/403.
 */
export async function authorizedMcpBody(res: ServerResponse, request: McpRequest, mcp: CompiledMcp, policy: BodyPolicy): Promise<Buffer> {
  const { req, rule, principal, segments } = request
  // MCP sends messages by POST only; a body on another method is refused rather than left to an upstream
  // that might read it as a message anyway (one routed with a catch-all method).
  if (req.method !== 'POST') throw new MalformedRequest('on an MCP route only a POST carries a message', { detail: `mcp: a body on ${req.method}` })
  if (!hasBody(req)) throw new MalformedRequest('an MCP POST carries one JSON-RPC message', { detail: 'mcp: no body' })
  // RFC 9110 §10.1.1: the body is wanted now, to be read before anything else is decided.
  if (req.headers.expect !== undefined) res.writeContinue()
  const body = await readWholeBody(req, Math.min(policy.bufferSize, rule.maxBodySize), policy, request)
  authorizeMessage(principal, rule, mcp, readMessage(req, body), { headers: req.headers, segments })
  return body
}
