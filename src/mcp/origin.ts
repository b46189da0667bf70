/**
 * MCP Streamable HTTP, "Security Warning" (2025-11-25 and 2026-07-28 transports): servers MUST validate the
 * `Origin` of every incoming connection against DNS rebinding, and answer 403 to one present and invalid. On
 * a route with `mcp`, the gateway does it for the server: a request with an `Origin` passes only when the
 * route's CORS policy allows that origin (or the route leaves CORS to the upstream: `cors: {upstream: true}`).
 * Native MCP clients send no `Origin`; a browser-based one needs its origin under `cors`.
 */
import type { IncomingMessage } from 'node:http'
import { allowedOrigin, type CorsPolicy } from '../cors/policy.js'
import { GatewayError } from '../errors/oauth-errors.js'

export class ForeignOrigin extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 403
  constructor() {
    super('this origin may not call this MCP server', { detail: 'mcp_origin_not_allowed' })
  }
}

export function refuseForeignOrigin(rule: { readonly cors: CorsPolicy | null }, req: IncomingMessage): void {
  const origin = req.headers.origin
  if (origin === undefined) return
  const policy = rule.cors
  if (policy?.upstream) return
  if (policy !== null && allowedOrigin(policy, origin) !== undefined) return
  throw new ForeignOrigin()
}
