/**
 * Claims to upstream request headers: `claim_headers: { X-Tenant: tenant, X-Roles: realm_access.roles }`
 * on an issuer (its tokens, every route) or a route (every token). Only the claims named are copied, never a
 * whole token or object; every header named anywhere is removed from every client request first, on every
 * route, so a client can never supply one. How values are written: forward/upstream-headers.ts claimHeaderValue.
 */
import type { GatewayConfig } from '../config/schema.js'
import { reservedHeaderNames } from '../common/header-names.js'
import {compilePath} from './conditions.js'
import type { Problem } from '../common/problem.js'
import type { ClaimPath } from './path.js'

export interface ClaimHeader {
  /** Lower case, as node:http and undici spell header names. */
  readonly name: string
  readonly path: ClaimPath
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
/** A bound on the headers one mapping may add (each is a header on every request it applies to). */
export const MAX_CLAIM_HEADERS = 32

/** One `claim_headers` map, or null when absent or empty; problems at `at`. */
export function compileClaimHeaders(config: Readonly<Record<string, string>> | undefined, at: Array<string | number>,
  reserved: ReadonlySet<string>, problems: Problem[]): ClaimHeader[] | null {
  if (config === undefined) return null
  const entries = Object.entries(config)
  if (entries.length > MAX_CLAIM_HEADERS) problems.push({ path: at, message: `maps more than ${MAX_CLAIM_HEADERS} headers` })
  const seen = new Map<string, string>()
  const headers: ClaimHeader[] = []
  for (const [header, claim] of entries) {
    const where = [...at, header]
    const name = header.toLowerCase()
    if (!TOKEN.test(header)) {
      problems.push({ path: where, message: `"${header}" is not an HTTP header name` , atKey: true })
      continue
    }
    if (reserved.has(name)) {
      problems.push({ path: where, message: `"${header}" is a header the gateway sets, strips or frames itself; choose another name` , atKey: true })
      continue
    }
    if (seen.has(name)) {
      problems.push({ path: where, message: `"${header}" is "${seen.get(name)}" again (header names ignore case)` , atKey: true })
      continue
    }
    seen.set(name, header)
    const path = compilePath(claim, where, problems)
    if (path) headers.push({ name, path })
  }
  return headers.length > 0 ? headers : null
}

/** The names claim headers may not take: the framing, hop-by-hop, credential, forwarding and identity headers. */
export function claimHeaderReserved(config: GatewayConfig): ReadonlySet<string> {
  return reservedHeaderNames(config.forward)
}
