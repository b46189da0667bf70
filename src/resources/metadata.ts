/**
 * RFC 9728 protected resources: `resources:` names each resource's identifier and its routes. For
 * each, the gateway serves its metadata document at the well-known URL derived from the identifier (§3.1),
 * names that URL in every 401 and `insufficient_scope` challenge of its routes (§5.1), and lets its routes
 * take only tokens issued for it (`aud` contains the identifier, RFC 8707, or one of its `audience`).
 */
import { didYouMean } from '../config/suggest.js'
import { isLoopbackHost } from '../config/loopback.js'
import type { GatewayConfig, ResourceConfig } from '../config/schema.js'
import { DEFAULT_DPOP_ALGORITHMS } from '../config/constants.js'

export const WELL_KNOWN = '/.well-known/oauth-protected-resource'

export interface CompiledResource {
  readonly identifier: string
  /** The metadata's path on this gateway's listener (§3.1: the well-known prefix, then the identifier's path). */
  readonly metadataPath: string
  /** Its absolute URL: `resource_metadata` in challenges. */
  readonly metadataUrl: string
  /** What a token's `aud` must contain one of on its routes. */
  readonly audiences: readonly string[]
  /** The metadata document, serialized once. */
  readonly document: string
}

export interface ResourceProblem {
  path: Array<string | number>
  message: string
}

/**
 * How clients reach the gateway: `server.public_url`, else the listener's own URL when it names a host
 * (not 0.0.0.0 or ::). Undefined when neither says.
 */
export function publicOrigin(config: GatewayConfig): URL | undefined {
  if (config.server?.public_url !== undefined) return URL.canParse(config.server.public_url) ? new URL(config.server.public_url) : undefined
  const listen = config.server?.listen ?? '127.0.0.1:8080'
  const host = listen.slice(0, listen.lastIndexOf(':'))
  if (host === '0.0.0.0' || host === '[::]' || host === '::') return undefined
  const url = `${config.server?.tls ? 'https' : 'http'}://${listen}`
  // A listener the schema lets through but no URL can name (a port over 65535) is reported by lint itself.
  return URL.canParse(url) ? new URL(url) : undefined
}

/** §3.1: `https://api.example.com/orders` → `/.well-known/oauth-protected-resource/orders`. */
export function metadataPathOf(identifier: URL): string {
  const path = identifier.pathname === '/' ? '' : identifier.pathname
  return WELL_KNOWN + path
}

/**
 * The authorization servers a resource names by default: the embedded one, then every issuer with
 * `discovery: true` (clients fetch an authorization server's RFC 8414 metadata; an issuer configured with a
 * JWKS alone may publish none, so naming it would send clients nowhere).
 */
export function defaultAuthorizationServers(config: GatewayConfig): string[] {
  const servers: string[] = []
  const embedded = config.authorization_server?.enabled ? config.authorization_server.issuer : undefined
  if (embedded !== undefined) servers.push(embedded)
  for (const issuer of config.issuers ?? []) {
    if (issuer.discovery === true && !servers.includes(issuer.issuer)) servers.push(issuer.issuer)
  }
  return servers
}

/** The scopes the resource's routes ask for (their MCP tools', prompts' and methods' too), each once, in route order. */
function routeScopes(config: GatewayConfig, routeIds: readonly string[]): string[] {
  const scopes = new Set<string>()
  const add = (rule: { scopes?: { all?: string[]; any?: string[] } } | undefined) => {
    for (const scope of [...(rule?.scopes?.all ?? []), ...(rule?.scopes?.any ?? [])]) scopes.add(scope)
  }
  for (const route of config.routes) {
    if (!routeIds.includes(route.id)) continue
    add(route)
    for (const group of [route.mcp?.tools, route.mcp?.prompts, route.mcp?.methods]) for (const rule of Object.values(group ?? {})) add(rule)
  }
  return [...scopes]
}

/**
 * RFC 9728 §2, its DPoP fields (RFC 9449): the algorithms a DPoP proof may use on the resource, unless every one
 * of its routes says `dpop: off`; `dpop_bound_access_tokens_required` when every one says `required`.
 */
function dpopFields(config: GatewayConfig, routeIds: readonly string[]): Record<string, unknown> {
  const modes = config.routes.filter((route) => routeIds.includes(route.id)).map((route) => route.dpop ?? 'allowed')
  if (modes.length === 0 || modes.every((mode) => mode === 'off')) return {}
  return {
    dpop_signing_alg_values_supported: config.dpop?.algorithms ?? DEFAULT_DPOP_ALGORITHMS,
    ...(modes.every((mode) => mode === 'required') && { dpop_bound_access_tokens_required: true }),
  }
}

function documentOf(config: GatewayConfig, resource: ResourceConfig): string {
  const servers = resource.authorization_servers ?? defaultAuthorizationServers(config)
  return JSON.stringify({
    resource: resource.resource,
    ...(servers.length > 0 && { authorization_servers: servers }),
    scopes_supported: resource.scopes_supported ?? routeScopes(config, resource.routes),
    bearer_methods_supported: ['header'],
    ...dpopFields(config, resource.routes),
    ...(resource.resource_name !== undefined && { resource_name: resource.resource_name }),
    ...(resource.resource_documentation !== undefined && { resource_documentation: resource.resource_documentation }),
    ...(resource.resource_policy_uri !== undefined && { resource_policy_uri: resource.resource_policy_uri }),
    ...(resource.resource_tos_uri !== undefined && { resource_tos_uri: resource.resource_tos_uri }),
  })
}

/**
 * Every resource, by route id, with the problems `check` reports: an identifier that is not how the gateway
 * is reached (`public_url`), one with a trailing `/` (§3.1 would drop it: two spellings, one document), http
 * off loopback, an unknown route id, a route in two resources, two resources at one metadata URL.
 */
export function compileResources(config: GatewayConfig, problems: ResourceProblem[] = []): {
  byRoute: ReadonlyMap<string, CompiledResource>
  byMetadataPath: ReadonlyMap<string, CompiledResource>
} {
  const byRoute = new Map<string, CompiledResource>()
  const byMetadataPath = new Map<string, CompiledResource>()
  const resources = config.resources ?? []
  // Made only when there is a resource to check: every build runs this, and a table has up to tens of thousands of routes.
  if (resources.length === 0) return { byRoute, byMetadataPath }
  const routeIds = new Set(config.routes.map((route) => route.id))
  const origin = publicOrigin(config)
  resources.forEach((resource, i) => {
    const at = ['resources', i]
    if (!URL.canParse(resource.resource)) {
      problems.push({ path: [...at, 'resource'], message: 'is not a valid URL' })
      return
    }
    const identifier = new URL(resource.resource)
    if (resource.resource.endsWith('/')) {
      problems.push({ path: [...at, 'resource'], message: 'must not end with "/" (RFC 9728 §3.1 drops it when forming the metadata URL: write it without)' })
    }
    if (identifier.protocol === 'http:' && !isLoopbackHost(identifier.hostname) && !config.server?.allow_insecure_http) {
      problems.push({ path: [...at, 'resource'], message: 'must be https:// (http:// on loopback only, or with server.allow_insecure_http)' })
    }
    if (!origin) {
      problems.push({ path: [...at, 'resource'], message: 'set server.public_url: the listener does not say how clients reach the gateway' })
    } else if (identifier.origin !== origin.origin || !`${identifier.pathname}/`.startsWith(origin.pathname.replace(/\/?$/, '/'))) {
      problems.push({ path: [...at, 'resource'], message: `must be served by this gateway: under ${origin.href.replace(/\/$/, '')} (server.public_url, or the listener)` })
    }
    const metadataPath = metadataPathOf(identifier)
    const compiled: CompiledResource = {
      identifier: resource.resource,
      metadataPath,
      metadataUrl: `${identifier.origin}${metadataPath}`,
      audiences: [resource.resource, ...(resource.audience ?? [])],
      document: documentOf(config, resource),
    }
    const clash = byMetadataPath.get(metadataPath)
    if (clash) problems.push({ path: [...at, 'resource'], message: `has the same metadata URL as ${clash.identifier}` })
    else byMetadataPath.set(metadataPath, compiled)
    resource.routes.forEach((id, j) => {
      if (!routeIds.has(id)) problems.push({ path: [...at, 'routes', j], message: `unknown route id "${id}"${didYouMean(id, routeIds)}` })
      else if (byRoute.has(id)) problems.push({ path: [...at, 'routes', j], message: `route "${id}" is already in the resource ${byRoute.get(id)!.identifier}` })
      else byRoute.set(id, compiled)
    })
  })
  return { byRoute, byMetadataPath }
}
