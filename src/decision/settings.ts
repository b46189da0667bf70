/**
 * `decision:` compiled: who may ask for decisions (addresses, a shared secret, client certificates),
 * and how long a proxy may cache an allowed one. Rebuilt with every runtime, so a reload changes both; the
 * listener itself (`listen`, `tls`) needs a restart.
 */
import { createHash } from 'node:crypto'
import { BlockList, isIP } from 'node:net'
import type { DecisionConfig, GatewayConfig, RouteConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'

export interface DecisionTrust {
  /**
   * The caller's address must be in one of these, IPv4 against the IPv4 ranges and IPv6 against the IPv6 ones
   * (one BlockList would match IPv4 addresses against `::/64`: found in review); null: any address.
   */
  readonly addresses: { readonly ipv4: BlockList; readonly ipv6: BlockList } | null
  /** The shared secret's header (lower case) and the SHA-256 of its value; null when none is configured. */
  readonly secret: { readonly header: string; readonly digest: Buffer } | null
  /** Names (subject CN or DNS subjectAltName) a verified client certificate must carry; null when not required. */
  readonly certificateNames: ReadonlySet<string> | null
  /** Whether the listener verifies client certificates (`tls.client_ca_file`). */
  readonly certificates: boolean
}

export interface CompiledDecision {
  readonly trust: DecisionTrust
  /** The longest a proxy may cache an allowed decision, in seconds (0: never). */
  readonly cacheSeconds: number
  /** Routes whose decisions depend on more than the token, method and URI (a proxy's cache key): never cacheable. */
  readonly uncacheable: ReadonlySet<string>
}

export const DEFAULT_SECRET_HEADER = 'X-Portcullis-Decision-Secret'
/** Without `trust`: loopback callers only. */
const DEFAULT_ADDRESSES = ['127.0.0.0/8', '::1/128']
/** The revocation bound may be raised up to this; past it a revoked token would stay usable for too long. */
export const MAX_CACHE_SECONDS = 300

/** `10.0.0.0/8`, `::1`, `fd00::/8`: the address and prefix length, or undefined when it is not one. */
export function parseRange(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const slash = text.indexOf('/')
  const address = slash === -1 ? text : text.slice(0, slash)
  const version = isIP(address)
  if (version === 0) return undefined
  const max = version === 4 ? 32 : 128
  const prefixText = slash === -1 ? String(max) : text.slice(slash + 1)
  if (!/^[0-9]{1,3}$/.test(prefixText) || Number(prefixText) > max) return undefined
  return { address, prefix: Number(prefixText), family: version === 4 ? 'ipv4' : 'ipv6' }
}

export const sha256 = (text: string): Buffer => createHash('sha256').update(text).digest()

/** Whether a condition of the route compares a claim with a request header (`{ header: Name }`). */
function readsHeaders(route: RouteConfig): boolean {
  const conditions = [...(route.claims?.all ?? []), ...(route.claims?.any ?? [])]
  const isHeader = (operand: unknown) => typeof operand === 'object' && operand !== null && 'header' in operand
  return conditions.some((condition) => isHeader(condition.equals) || isHeader(condition.contains))
}

export function compileDecision(config: GatewayConfig): CompiledDecision | null {
  const decision: DecisionConfig | undefined = config.decision
  if (decision === undefined) return null
  const trust = decision.trust
  const ranges = trust === undefined ? DEFAULT_ADDRESSES : trust.addresses
  let addresses: DecisionTrust['addresses'] = null
  if (ranges !== undefined) {
    addresses = { ipv4: new BlockList(), ipv6: new BlockList() }
    for (const text of ranges) {
      const range = parseRange(text)
      // Refused by lint before a runtime is ever built.
      if (range === undefined) throw new Error(`decision.trust.addresses: ${text} is not an address range`)
      addresses[range.family].addSubnet(range.address, range.prefix, range.family)
    }
  }
  const secret = trust?.secret === undefined ? null
    : { header: (trust.secret_header ?? DEFAULT_SECRET_HEADER).toLowerCase(), digest: sha256(trust.secret) }
  const names = trust?.client_certificate_names
  return {
    trust: {
      addresses,
      secret,
      certificateNames: names === undefined ? null : new Set(names),
      certificates: decision.tls?.client_ca_file !== undefined,
    },
    cacheSeconds: Math.floor(parseDuration(decision.cache_ttl ?? '1s') / 1000),
    // Rate limits count every request (a cached decision would not be counted); header conditions, and an `mcp`
    // route's Mcp-Method and Mcp-Name (which tool a message calls), are headers the cache key does not hold.
    uncacheable: new Set(config.routes.filter((route) => readsHeaders(route) || route.mcp !== undefined
      || (route.rate_limits ?? config.rate_limits?.default ?? []).length > 0).map((route) => route.id)),
  }
}
