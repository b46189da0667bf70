/** What the schema cannot say about `decision:`: problems refuse the config, warnings are logged and printed by `check`. */
import type { GatewayConfig } from '../config/schema.js'
import { isLoopbackHost } from '../config/loopback.js'
import { readable } from '../config/files.js'
import { badPort, parseListen } from '../config/listen.js'
import { parseDuration } from '../config/units.js'
import type { Problem } from '../common/problem.js'
import { MAX_CACHE_SECONDS, parseRange } from './settings.js'

export function lintDecision(config: GatewayConfig): Problem[] {
  const decision = config.decision
  if (decision === undefined) return []
  const problems: Problem[] = []
  const at = (...path: string[]) => ['decision', ...path]
  if (badPort(decision.listen)) problems.push({ path: at('listen'), message: 'the port must be at most 65535' })
  for (const [name, other] of [['server.listen', config.server?.listen ?? '127.0.0.1:8080'], ['admin.listen', config.admin?.listen]] as const) {
    if (other === decision.listen) problems.push({ path: at('listen'), message: `is ${name} too: the decision endpoint has its own listener` })
  }
  const tls = decision.tls
  for (const key of ['cert_file', 'key_file', 'client_ca_file'] as const) {
    const file = tls?.[key]
    if (file !== undefined && !readable(file)) problems.push({ path: at('tls', key), message: `cannot read ${file}` })
  }
  const trust = decision.trust
  if (trust !== undefined) {
    trust.addresses?.forEach((text, index) => {
      if (parseRange(text) === undefined) problems.push({ path: [...at('trust', 'addresses'), index], message: `${text} is not an IP address or CIDR range (10.0.0.0/8, fd00::/8)` })
    })
    if (trust.secret_header !== undefined && trust.secret === undefined) problems.push({ path: at('trust', 'secret_header'), message: 'names the header of a secret that is not set (trust.secret)' })
    if (trust.client_certificate_names !== undefined && tls?.client_ca_file === undefined) {
      problems.push({ path: at('trust', 'client_certificate_names'), message: 'needs decision.tls.client_ca_file: client certificates are verified against it' })
    }
    if (trust.addresses === undefined && trust.secret === undefined && tls?.client_ca_file === undefined) {
      problems.push({ path: at('trust'), message: 'names no trusted source: set addresses, a secret, or client certificates (tls.client_ca_file)' })
    }
  }
  if (decision.cache_ttl !== undefined) {
    const ms = parseDuration(decision.cache_ttl)
    if (ms % 1000 !== 0 || ms / 1000 > MAX_CACHE_SECONDS) {
      problems.push({ path: at('cache_ttl'), message: `must be whole seconds, at most ${MAX_CACHE_SECONDS / 60}m (the longest a revoked token may still be let through); 0s turns caching off` })
    }
  }
  return problems
}

export function decisionWarnings(config: GatewayConfig): string[] {
  const decision = config.decision
  if (decision === undefined) return []
  const warnings: string[] = []
  const loopback = isLoopbackHost(parseListen(decision.listen).host)
  if (!loopback && decision.tls === undefined) {
    warnings.push(`decision.listen ${decision.listen} is not loopback and decision.tls is not set: the proxy's requests, tokens included, would cross the network in clear text`)
  }
  if (!loopback && decision.trust === undefined) {
    warnings.push(`decision.listen ${decision.listen} is not loopback but decision.trust is not set: only loopback callers are trusted; name the proxy's addresses, a secret or client certificates`)
  }
  const trust = decision.trust
  const anyAddress = trust?.addresses?.some((text) => { const range = parseRange(text); return range !== undefined && range.prefix === 0 })
  if (anyAddress && trust?.secret === undefined && decision.tls?.client_ca_file === undefined) {
    warnings.push('decision.trust.addresses admits every address and no secret or client certificate is required: any caller that reaches the listener picks the URL being authorized')
  }
  for (const route of config.routes) {
    if (route.mcp !== undefined) warnings.push(`routes ${route.id}: the decision endpoint authorizes its MCP messages from their Mcp-Method and Mcp-Name headers, never the body: the MCP server behind must refuse a body that disagrees with them (MCP 2026-07-28, Server Validation), or its tool rules can be walked around; clients that do not send them are refused (400). The proxy mode reads the body itself`)
  }
  const dpopUsed = config.dpop !== undefined || config.routes.some((route) => route.dpop !== undefined && route.dpop !== 'off')
    || (config.issuers ?? []).some((issuer) => issuer.dpop !== undefined && issuer.dpop !== 'off')
  if (dpopUsed && config.server?.public_url === undefined) {
    warnings.push('DPoP is configured but server.public_url is not: the decision endpoint refuses DPoP requests, whose proofs name the URL clients used (set it to the proxy\'s public URL)')
  }
  return warnings
}
