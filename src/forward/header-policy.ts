/**
 * What the gateway does to request headers, decided once per config (`forward`): which of the client's are
 * removed (hop-by-hop per RFC 9110 §7.6.1, spoofable identity and forwarding headers, `forward.strip_headers`)
 * and under which names the identity headers are set (`forward.identity_headers`).
 */
import type { ForwardConfig } from '../config/schema.js'
import type { ClaimHeader } from '../claims/headers.js'
import { FORWARDED, HOP_BY_HOP, identityNames, STRIPPED_HEADERS } from '../common/header-names.js'
import { parseSize } from '../config/units.js'

export interface HeaderPolicy {
  readonly removed: ReadonlySet<string>
  /** `issuers[].claim_headers`, by issuer; null when no issuer maps any. */
  readonly issuerClaimHeaders: ReadonlyMap<string, readonly ClaimHeader[]> | null
  readonly subject: string
  readonly clientId: string
  readonly scopes: string
  readonly issuer: string
  readonly trustForwarded: boolean
  readonly tls: boolean
  /**
   * `forward.max_identity_header_size`: the identity and claim headers of one request together (names and
   * values), at most; a token whose claims would make more is refused, never forwarded.
   */
  readonly maxIdentityBytes: number
  /** The identity headers' names, counted against `maxIdentityBytes` on every request. */
  readonly identityNameBytes: number
  /** `forward.client_certificate_header`: the bound certificate's subject goes upstream under this name; null: never. */
  readonly clientCertificate: string | null
}

/** `forward.max_identity_header_size` by default: half of what the client may send (`server.max_header_size`). */
export const DEFAULT_MAX_IDENTITY_HEADER_SIZE = 8 * 1024

/**
 * @param claimHeaders every header any `claim_headers` names (removed from every request, as identity
 *   headers are), and the issuers' mappings
 */
/** @param alsoRemoved more request headers not to forward (`dpop` unless `dpop.forward_proof`) */
export function createHeaderPolicy(forward: ForwardConfig | undefined, tls: boolean,
  claimHeaders: { names: readonly string[]; byIssuer: ReadonlyMap<string, readonly ClaimHeader[]> } = { names: [], byIssuer: new Map() },
  alsoRemoved: readonly string[] = []): HeaderPolicy {
  const identity = identityNames(forward)
  const trustForwarded = forward?.trust_forwarded_headers ?? false
  const removed = new Set([...HOP_BY_HOP, ...identity, ...STRIPPED_HEADERS, ...(forward?.strip_headers ?? []).map((name) => name.toLowerCase()),
    ...(trustForwarded ? [] : FORWARDED), ...claimHeaders.names, ...alsoRemoved])
  if (forward?.strip_authorization) removed.add('authorization')
  const clientCertificate = forward?.client_certificate_header?.toLowerCase() ?? null
  // Only the gateway sets it: a client's own copy is never forwarded.
  if (clientCertificate !== null) removed.add(clientCertificate)
  return {
    removed,
    issuerClaimHeaders: claimHeaders.byIssuer.size > 0 ? claimHeaders.byIssuer : null,
    subject: identity[0]!,
    clientId: identity[1]!,
    scopes: identity[2]!,
    issuer: identity[3]!,
    trustForwarded,
    tls,
    maxIdentityBytes: forward?.max_identity_header_size === undefined ? DEFAULT_MAX_IDENTITY_HEADER_SIZE : parseSize(forward.max_identity_header_size),
    identityNameBytes: identity[0]!.length + identity[1]!.length + identity[2]!.length + identity[3]!.length,
    clientCertificate,
  }
}

/**
 * The names of the request headers the gateway adds (forwarding, identity, the claim headers `claimHeaderNames`,
 * the trace context): the same on every request, so entered once in undici's table of known names (known-names.ts).
 */
export function addedHeaderNames(policy: HeaderPolicy, claimHeaderNames: readonly string[]): string[] {
  return [...FORWARDED, policy.subject, policy.clientId, policy.scopes, policy.issuer, ...claimHeaderNames, 'traceparent', 'tracestate']
}
