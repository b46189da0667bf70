/** What the schema cannot say: references, overlaps, combinations, files that must exist. */
import { cleartextHost, isLoopbackHost } from '../config/loopback.js'
import { readable } from '../config/files.js'
import { fileURLToPath } from 'node:url'
import { DEFAULT_STREAMS_PER_ADDRESS, poolSize } from '../forward/pool-size.js'
import type { GatewayConfig } from '../config/schema.js'
import type { Problem } from '../common/problem.js'
import { compileRules } from '../rules/compile.js'
import { compileClaimPlan } from '../rules/claim-plan.js'
import { compileResources, defaultAuthorizationServers } from '../resources/metadata.js'
import { lintCors } from '../cors/lint.js'
import { lintMcp } from '../mcp/compile.js'
import { authorizationServerWarnings, lintAuthorizationServer } from '../authserver/lint.js'
import { lintListenerCertificates } from '../authserver/lint-certificates.js'
import { parseDuration, parseSize } from '../config/units.js'
import { badPort } from '../config/listen.js'
import { decisionWarnings, lintDecision } from '../decision/lint.js'

/**
 * `log.buffer`: pino's destination measures the whole pending text on every line it adds, so past a few
 * KiB a bigger buffer costs more per line than the writes it saves (docs/configuration.md, `log`).
 */
const MAX_LOG_BUFFER = 64 * 1024

/** The schema's patterns only shape URLs and host:port; these must also parse, or `start` would crash. */
function badUrl(value: string): boolean {
  if (!URL.canParse(value)) return true
  const { port } = new URL(value)
  return port !== '' && Number(port) > 65535
}

/**
 * The http:// URLs off loopback that would carry keys, tokens or client secrets, and what crossing the
 * network in clear text exposes: errors unless `server.allow_insecure_http` (RFC 7662 §4: introspection
 * MUST use TLS; RFC 8414 §2: an issuer is an https URL).
 */
function cleartextUrls(config: GatewayConfig): Array<{ path: Array<string | number>; host: string; exposes: string }> {
  const found: Array<{ path: Array<string | number>; host: string; exposes: string }> = []
  const add = (path: Array<string | number>, value: string | undefined, exposes: string) => {
    const host = cleartextHost(value)
    if (host !== undefined) found.push({ path, host, exposes })
  }
  ;(config.issuers ?? []).forEach((issuer, index) => {
    // Without discovery, `issuer` is only compared with `iss`: nothing is fetched from it.
    if (issuer.discovery) add(['issuers', index, 'issuer'], issuer.issuer, 'the discovery metadata, which names the key set, could be replaced in transit')
    add(['issuers', index, 'jwks_uri'], issuer.jwks_uri, 'the signing keys could be replaced in transit')
    add(['issuers', index, 'introspection', 'endpoint'], issuer.introspection?.endpoint, 'the client secret and every token sent there would cross the network in clear text')
  })
  const as = config.authorization_server
  if (as?.enabled) add(['authorization_server', 'issuer'], as.issuer, 'clients would send their secrets, passwords and tokens in clear text')
  return found
}

export function lintConfig(config: GatewayConfig): Problem[] {
  const compiled = compileRules(config)
  const problems: Problem[] = [...compiled.problems]
  // The issuers' claim settings (permission, client id and audience claims, conditions, headers).
  compileClaimPlan(config, compiled.rules, problems)
  // `resources:`: RFC 9728 resources (identifiers served by this gateway, routes that exist, one resource each).
  compileResources(config, problems)
  // `cors:`: CORS origins, patterns, credentials with `*`, max_age, route overrides.
  problems.push(...lintCors(config))
  // `server.tls` client certificates (RFC 8705).
  lintListenerCertificates(config, problems)
  // `routes[].mcp`: MCP routes read their messages whole, within server.body_buffer_size.
  problems.push(...lintMcp(config))
  if (!config.server?.allow_insecure_http) {
    for (const { path, host, exposes } of cleartextUrls(config)) {
      problems.push({ path, message: `uses http:// off loopback (${host}): ${exposes}; use https://, or set server.allow_insecure_http: true` })
    }
  }
  if (badPort(config.server?.listen)) problems.push({ path: ['server', 'listen'], message: 'the port must be at most 65535' })
  if (badPort(config.admin?.listen)) problems.push({ path: ['admin', 'listen'], message: 'the port must be at most 65535' })
  if (config.server?.public_url !== undefined && badUrl(config.server.public_url)) {
    problems.push({ path: ['server', 'public_url'], message: 'is not a valid URL' })
  }
  const tls = config.server?.tls
  if (tls) {
    for (const key of ['cert_file', 'key_file', 'client_ca_file'] as const) {
      const file = tls[key]
      if (file !== undefined && !readable(file)) problems.push({ path: ['server', 'tls', key], message: `cannot read ${file}` })
    }
  }
  for (const [name, upstream] of Object.entries(config.upstreams)) {
    if (upstream.url !== 'builtin:echo' && badUrl(upstream.url)) {
      problems.push({ path: ['upstreams', name, 'url'], message: 'is not a valid URL' })
    }
    if (upstream.ca_file && !readable(upstream.ca_file)) {
      problems.push({ path: ['upstreams', name, 'ca_file'], message: `cannot read ${upstream.ca_file}` })
    }
    if (upstream.ca_file && !upstream.url.startsWith('https://')) {
      problems.push({ path: ['upstreams', name, 'ca_file'], message: 'ca_file needs an https:// url' })
    }
  }
  const seen = new Map<string, number>()
  ;(config.issuers ?? []).forEach((issuer, index) => {
    const at = ['issuers', index]
    if (seen.has(issuer.issuer)) problems.push({ path: [...at, 'issuer'], message: `duplicate issuer (also issuers[${seen.get(issuer.issuer)}])` })
    seen.set(issuer.issuer, index)
    const keySources = [issuer.jwks_uri, issuer.jwks_file, issuer.discovery || undefined].filter((v) => v !== undefined).length
    if (keySources > 1) problems.push({ path: at, message: 'set only one of jwks_uri, jwks_file or discovery: true' })
    if (keySources === 0 && !issuer.introspection) {
      problems.push({ path: at, message: 'set one of jwks_uri, jwks_file or discovery: true, or introspection (or both)' })
    }
    const introspection = issuer.introspection
    if (introspection) {
      if (badUrl(introspection.endpoint)) problems.push({ path: [...at, 'introspection', 'endpoint'], message: 'is not a valid URL' })
      if (introspection.ca_file && !readable(introspection.ca_file)) {
        problems.push({ path: [...at, 'introspection', 'ca_file'], message: `cannot read ${introspection.ca_file}` })
      }
    }
    if (issuer.jwks_file !== undefined && !readable(issuer.jwks_file)) {
      problems.push({ path: [...at, 'jwks_file'], message: `cannot read ${issuer.jwks_file}` })
    }
    if (issuer.jwks_uri !== undefined && badUrl(issuer.jwks_uri)) {
      problems.push({ path: [...at, 'jwks_uri'], message: 'is not a valid URL' })
    }
    if (issuer.discovery && (!/^https?:\/\//.test(issuer.issuer) || badUrl(issuer.issuer))) {
      problems.push({ path: [...at, 'issuer'], message: 'discovery needs an http(s) issuer URL' })
    }
    if (issuer.jwks_uri?.startsWith('file://') && !badUrl(issuer.jwks_uri)) {
      let file: string | undefined
      try { file = fileURLToPath(issuer.jwks_uri) } catch { /* reported below */ }
      if (!file || !readable(file)) problems.push({ path: [...at, 'jwks_uri'], message: `cannot read ${issuer.jwks_uri}` })
    }
  })
  const logBuffer = config.log?.buffer
  if (logBuffer !== undefined && parseSize(logBuffer) > MAX_LOG_BUFFER) problems.push({ path: ['log', 'buffer'], message: 'must be at most 64kb' })
  const flushMs = config.log?.flush_interval === undefined ? undefined : parseDuration(config.log.flush_interval)
  if (flushMs !== undefined && (flushMs < 10 || flushMs > 60_000)) problems.push({ path: ['log', 'flush_interval'], message: 'must be between 10ms and 1m' })
  // A body timeout or queue wait of 0 would refuse every body, or every request that finds the pool busy.
  const bodyTimeout = config.server?.body_timeout
  if (bodyTimeout !== undefined && parseDuration(bodyTimeout) < 100) problems.push({ path: ['server', 'body_timeout'], message: 'must be at least 100ms' })
  const bodyBuffer = config.server?.body_buffer_size
  if (bodyBuffer !== undefined && parseSize(bodyBuffer) > 16 * 1024 * 1024) {
    problems.push({ path: ['server', 'body_buffer_size'], message: 'must be at most 16mb (each request in flight may hold this much memory)' })
  }
  const bodyMemory = config.server?.body_memory
  if (bodyMemory !== undefined && parseSize(bodyMemory) !== 0 && parseSize(bodyMemory) < Math.max(1024 * 1024, parseSize(bodyBuffer ?? '64kb'))) {
    problems.push({ path: ['server', 'body_memory'], message: 'must be 0b (no budget) or at least 1mb and server.body_buffer_size: below that, bodies of one normal size would be refused' })
  }
  for (const [name, upstream] of Object.entries(config.upstreams)) {
    if (upstream.queue_timeout !== undefined && parseDuration(upstream.queue_timeout) < 10) {
      problems.push({ path: ['upstreams', name, 'queue_timeout'], message: 'must be at least 10ms' })
    }
  }
  problems.push(...lintAuthorizationServer(config))
  // `decision:`: the decision endpoint's listener, trust and cache bound.
  problems.push(...lintDecision(config))
  return problems
}

/** Insecure but legal settings: logged at start and printed by `portcullis check`. */
export function configWarnings(config: GatewayConfig): string[] {
  const warnings: string[] = []
  const listen = config.server?.listen ?? '127.0.0.1:8080'
  const host = listen.slice(0, listen.lastIndexOf(':'))
  if (!config.server?.tls && !isLoopbackHost(host)) {
    warnings.push(`server.listen ${listen} is not loopback and server.tls is not set: tokens would cross the network in clear text`)
  }
  ;(config.issuers ?? []).forEach((issuer, index) => {
    for (const key of ['issuer', 'jwks_uri', 'introspection.endpoint'] as const) {
      // An `iss` need not be a URL (RFC 7519 §4.1.1 StringOrURI); what does not parse is not http:// either.
      const host = cleartextHost(key === 'introspection.endpoint' ? issuer.introspection?.endpoint : issuer[key])
      if (host !== undefined) warnings.push(`issuers[${index}].${key} uses http:// off loopback (${host}): keys or tokens can be tampered with in transit`)
    }
  })
  // More specific routes win, so `/**` is the fallback: with auth: none, whatever no other route covers (a
  // path added upstream tomorrow) is open. A preflight-only catch-all (methods: [OPTIONS]) is the usual CORS setup.
  // (Every reload runs this on the event loop: the path first, so the method list is read for a catch-all alone.)
  config.routes.forEach((route, index) => {
    if (route.path === '/**' && route.auth === 'none' && (route.methods?.some((method) => method !== 'OPTIONS') ?? true)) {
      warnings.push(`routes[${index}] (${route.id}) is a catch-all "/**" with auth: none: every request no other route matches reaches upstream ${route.upstream} without a token`)
    }
  })
  // `signing.rotation_publish_delay`: clients cache a JWKS for up to 5 minutes; a shorter publish delay can make them
  // meet tokens signed by a key they have not fetched yet.
  const publishDelay = config.authorization_server?.enabled ? config.authorization_server.signing?.rotation_publish_delay : undefined
  if (publishDelay !== undefined && parseDuration(publishDelay) < 5 * 60_000) {
    warnings.push(`authorization_server.signing.rotation_publish_delay ${publishDelay} is under 5m: clients with a cached JWKS may refuse tokens signed right after a rotation`)
  }
  // `authorization_server.issuer` is an https URL (RFC 8414 §2); http is for loopback development only.
  const asHost = config.authorization_server?.enabled ? cleartextHost(config.authorization_server.issuer) : undefined
  if (asHost !== undefined) {
    warnings.push(`authorization_server.issuer uses http:// off loopback (${asHost}): tokens and client secrets would cross the network in clear text`)
  }
  // RFC 9728 makes `authorization_servers` optional; MCP clients (Authorization Server Discovery) need one.
  ;(config.resources ?? []).forEach((resource, index) => {
    if (resource.authorization_servers === undefined && defaultAuthorizationServers(config).length === 0) {
      warnings.push(`resources[${index}] (${resource.resource}) names no authorization server: set authorization_servers, enable authorization_server, or give an issuer discovery: true; clients (MCP's among them) cannot find where to get a token`)
    }
  })
  // One address streaming as many bodies as an upstream lets stream at once (half its pool) could hold them all.
  const perAddress = config.server?.body_streams_per_address ?? DEFAULT_STREAMS_PER_ADDRESS
  for (const [name, upstream] of Object.entries(config.upstreams ?? {})) {
    const streamed = poolSize(upstream).maxStreaming
    if (perAddress >= streamed) {
      warnings.push(`server.body_streams_per_address ${perAddress} is not under the ${streamed} streamed bodies upstreams.${name} takes at once ` +
        '(half its connections): one client address could hold them all; lower it or raise connections')
    }
  }
  // RFC 9449 §8: the workers take the primary's nonce key (cluster-messages.ts), which lives as long as it does.
  const workers = config.server?.workers
  if (config.dpop?.nonce && config.dpop.nonce_secret === undefined && workers !== undefined && workers !== 1) {
    warnings.push(`dpop.nonce is on without dpop.nonce_secret and server.workers is ${workers}: the workers share one nonce key the primary makes ` +
      'at start, so each accepts the others\' nonces; a restart makes a new key (a client then gets use_dpop_nonce once and retries). ' +
      'Set nonce_secret to keep nonces across restarts and instances')
  }
  warnings.push(...authorizationServerWarnings(config))
  warnings.push(...decisionWarnings(config))
  return warnings
}
