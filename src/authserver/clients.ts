/**
 * Registered clients: from the YAML, and from RFC 7591 registrations in the store. Looked up by
 * client_id, the YAML first; secrets only ever compared in constant time.
 */
import { X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { certificateThumbprint, normalizeDn } from '../common/client-certificate.js'
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import type { ClientConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { hashSecret, verifySecret } from '../crypto/secret-hash.js'
import type { ClientMetadata } from './registration/policy.js'
import type { DynamicClientSource, RegisteredClient } from './registered-client.js'

const sha256 = (value: string) => createHash('sha256').update(value).digest()

/** Constant time: equal-length digests so neither content nor length leaks through timing. */
function constantTimeEqual(a: string, b: string): boolean {
  return timingSafeEqual(sha256(a), sha256(b))
}

let decoy: Promise<string> | undefined
/**
 * The hash of a random secret, made on first use: a failure with no hash of its own to check (an unknown
 * client_id, a wrong plain secret) verifies against it, so that every failure costs one scrypt and timing
 * tells no client_id from another (without it, 2.4 ms against 79 ms told which ones exist).
 */
function decoyHash(): Promise<string> {
  return (decoy ??= hashSecret(randomBytes(32).toString('base64url')))
}

async function verifyAgainstDecoy(secret: string): Promise<false> {
  await verifySecret(secret, await decoyHash())
  return false
}

/**
 * RFC 8705 §2.1: `tls_client_auth`, a certificate that chains to `server.tls.client_ca_file` and names the
 * client's `tls_client_auth_subject_dn` or `tls_client_auth_san_dns`; §2.2: `self_signed_tls_client_auth`, the
 * very certificate of `self_signed_certificate_file` (compared by its SHA-256 thumbprint).
 */
function certificateCheck(config: ClientConfig): RegisteredClient['certificate'] {
  if (config.token_endpoint_auth_method === 'tls_client_auth') {
    const dn = config.tls_client_auth_subject_dn === undefined ? undefined : normalizeDn(config.tls_client_auth_subject_dn)
    const san = config.tls_client_auth_san_dns?.toLowerCase()
    return {
      accepts: (peer) => peer !== undefined && peer.authorized &&
        (dn !== undefined ? normalizeDn(peer.subject) === dn : san !== undefined && peer.dnsNames.some((name) => name.toLowerCase() === san)),
    }
  }
  if (config.token_endpoint_auth_method === 'self_signed_tls_client_auth' && config.self_signed_certificate_file !== undefined) {
    const thumbprint = certificateThumbprint(new X509Certificate(readFileSync(config.self_signed_certificate_file)).raw)
    return { accepts: (peer) => peer !== undefined && peer.thumbprint === thumbprint }
  }
  return undefined
}

function register(config: ClientConfig): RegisteredClient {
  const hasSecret = config.client_secret !== undefined || config.client_secret_hash !== undefined
  // scrypt costs tens of milliseconds by design: once a secret has verified, its SHA-256 digest is kept
  // (never the secret) and the next presentation of the same secret is compared against that, in
  // constant time. A wrong secret always pays the full scrypt (and is throttled), a plain one included:
  // against the decoy hash.
  let verifiedDigest: Buffer | undefined
  const authMethod = config.token_endpoint_auth_method ?? (hasSecret ? 'client_secret_basic' : 'none')
  const certificate = certificateCheck(config)
  return {
    clientId: config.client_id,
    name: config.name ?? config.client_id,
    authMethod,
    confidential: authMethod !== 'none',
    grantTypes: new Set(config.grant_types),
    scopes: new Set(config.scopes),
    redirectUris: config.redirect_uris ?? [],
    ...(config.post_logout_redirect_uris !== undefined && { postLogoutRedirectUris: config.post_logout_redirect_uris }),
    requireState: config.require_state ?? true,
    requirePkce: authMethod === 'none' ? true : config.require_pkce ?? true,
    firstParty: config.first_party ?? false,
    ...(config.refresh_token_reuse_grace !== undefined && { refreshReuseGraceMs: parseDuration(config.refresh_token_reuse_grace) }),
    idTokenAlg: config.id_token_signed_response_alg ?? 'RS256',
    dpopBoundAccessTokens: config.dpop_bound_access_tokens ?? false,
    ...(certificate !== undefined && { certificate }),
    verifySecret: async (secret) => {
      if (config.client_secret_hash !== undefined) {
        const digest = sha256(secret)
        if (verifiedDigest !== undefined && timingSafeEqual(digest, verifiedDigest)) return true
        const ok = await verifySecret(secret, config.client_secret_hash)
        if (ok) verifiedDigest = digest
        return ok
      }
      const ok = config.client_secret !== undefined && constantTimeEqual(secret, config.client_secret)
      if (!ok) await verifySecret(secret, await decoyHash())
      return ok
    },
  }
}

/** SHA-256 digests of secrets that verified, by the registration's scrypt hash: the clients themselves are read per request. */
const verifiedDynamicSecrets = new LRUCache<string, Buffer>({ max: 10_000 })

/** A client that registered itself, from its stored registration: public, or with an scrypt-hashed secret. */
/** @param policyScopes `registration.policy.scopes`: what a user may grant it (RegisteredClient.consentScopes) */
export function dynamicClient(clientId: string, metadata: ClientMetadata, secretHash: string | undefined,
  recordUse: () => Promise<void>, policyScopes: ReadonlySet<string>): RegisteredClient {
  const confidential = metadata.token_endpoint_auth_method !== 'none'
  return {
    clientId,
    name: metadata.client_name ?? clientId,
    authMethod: metadata.token_endpoint_auth_method,
    confidential,
    grantTypes: new Set(metadata.grant_types),
    // Registered before the policy narrowed: only what the policy still allows.
    scopes: new Set((metadata.scope === '' ? [] : metadata.scope.split(' ')).filter((scope) => policyScopes.has(scope))),
    consentScopes: policyScopes,
    redirectUris: metadata.redirect_uris,
    requireState: true,
    // PKCE S256 for every registered client, confidential ones included (OAuth 2.1 §4.1.1, with no opt-out).
    requirePkce: true,
    firstParty: false,
    idTokenAlg: metadata.id_token_signed_response_alg ?? 'RS256',
    dpopBoundAccessTokens: metadata.dpop_bound_access_tokens ?? false,
    verifySecret: async (secret) => {
      if (!confidential || secretHash === undefined) return verifyAgainstDecoy(secret)
      const digest = sha256(secret)
      const verified = verifiedDynamicSecrets.get(secretHash)
      if (verified !== undefined && timingSafeEqual(digest, verified)) return true
      const ok = await verifySecret(secret, secretHash)
      if (ok) verifiedDynamicSecrets.set(secretHash, digest)
      return ok
    },
    dynamic: { recordUse },
  }
}

/** What a Client ID Metadata Document says, as checked by client-metadata/documents.ts. */
export interface MetadataDocumentClient {
  readonly name: string | undefined
  readonly host: string
  readonly grantTypes: ReadonlyArray<'authorization_code' | 'refresh_token'>
  readonly scopes: readonly string[]
  readonly redirectUris: readonly string[]
  /** `dpop_bound_access_tokens` (RFC 9449 §5.2): every token request must carry a DPoP proof. */
  readonly dpopBoundAccessTokens: boolean
}

/** A client described by its metadata document: always public, PKCE S256 and state required. */
export function metadataDocumentClient(clientId: string, document: MetadataDocumentClient): RegisteredClient {
  return {
    clientId,
    name: document.name ?? document.host,
    authMethod: 'none',
    confidential: false,
    grantTypes: new Set(document.grantTypes),
    scopes: new Set(document.scopes),
    redirectUris: document.redirectUris,
    requireState: true,
    requirePkce: true,
    firstParty: false,
    idTokenAlg: 'RS256',
    dpopBoundAccessTokens: document.dpopBoundAccessTokens,
    verifySecret: verifyAgainstDecoy,
    metadataDocument: { host: document.host },
  }
}

export class ClientRegistry {
  private readonly clients: ReadonlyMap<string, RegisteredClient>
  /**
   * @param dynamic the registrations in the store, when `registration.enabled`
   * @param documents Client ID Metadata Documents, when `client_metadata_documents.enabled`: URL client_ids only
   */
  constructor(configs: readonly ClientConfig[], private readonly dynamic?: DynamicClientSource,
    private readonly documents?: DynamicClientSource) {
    this.clients = new Map(configs.map((config) => [config.client_id, register(config)]))
  }
  /** What a secret presented with an unknown client_id costs: what a wrong one of a registered client does. Always false. */
  async verifyUnknown(secret: string): Promise<false> {
    return verifyAgainstDecoy(secret)
  }
  /** A client of the YAML only (synchronous); everything that serves a request uses {@link lookup}. */
  find(clientId: string): RegisteredClient | undefined {
    return this.clients.get(clientId)
  }
  /** Whether the YAML defines this client_id: a registration can never take one. */
  isConfigured(clientId: string): boolean {
    return this.clients.has(clientId)
  }
  /**
   * The YAML's client (which wins any clash), else a registration in the store, else (a URL client_id) its
   * metadata document; throws when the store fails, InvalidClient when the document does, TooManyAttempts when
   * `from`, the client address that asks, has made the server fetch too many documents.
   */
  async lookup(clientId: string, from?: string): Promise<RegisteredClient | undefined> {
    return this.clients.get(clientId) ?? await this.dynamic?.client(clientId) ?? await this.documents?.client(clientId, from)
  }
  /** The YAML's clients (metadata lists their scopes). */
  all(): RegisteredClient[] {
    return [...this.clients.values()]
  }
}
