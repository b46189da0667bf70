/** `authorization_server:` with every default applied, in the units the code uses. */
import type { AuthorizationServerConfig, DpopConfig, GrantType } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { resolveDpop, type DpopSettings } from '../dpop/settings.js'
import { KeyEncryptionKey } from './key-encryption.js'
import { resolveRegistration, type RegistrationSettings } from './registration/policy.js'
import { resolveClientMetadataDocuments, type ClientMetadataDocumentSettings } from './client-metadata/documents.js'

export interface AuthServerSettings {
  /** Byte-identical everywhere it appears (RFC 8414 §3.3, RFC 9207 §2.3). */
  readonly issuer: string
  /** The path prefix of every endpoint: the issuer URL's path without a trailing slash ('' at the root). */
  readonly prefix: string
  /** `path` is the SQLite file; `url` and `prefix` are Redis' (url is set when type is redis: checked at load). */
  readonly store: { readonly type: 'sqlite' | 'memory' | 'redis'; readonly path: string; readonly url?: string; readonly prefix: string }
  readonly algorithm: 'ES256' | 'RS256' | 'EdDSA'
  readonly publishDelayMs: number
  /** `signing.key_encryption_key`: seals the private signing keys in the store (key-encryption.ts). */
  readonly keyEncryption?: KeyEncryptionKey
  readonly accessTokenFormat: 'jwt' | 'opaque'
  readonly accessTokenTtlSeconds: number
  /** `access_token.audience`: the `aud` of a token whose request names no `resource` (RFC 8707). */
  readonly audience: readonly string[]
  /** `access_token.claims`: the user claims every access token of a user's grant carries. */
  readonly accessTokenClaims: readonly string[]
  /**
   * Every `resource` a client may ask for (RFC 8707): `audience` and the gateway's `resources[].resource`
   * identifiers. What the embedded issuer's tokens may carry as `aud`.
   */
  readonly resourceIndicators: readonly string[]
  readonly refreshTokenTtlSeconds: number
  /**
   * `refresh_token.reuse_grace` (0 by default, at most 10 s): how long after a rotation the rotated-out token,
   * presented again by its client for the same scope and audience, gets that rotation's response once more
   * instead of revoking the grant (grants/refresh-token.ts). A client may set its own.
   */
  readonly refreshReuseGraceMs: number
  /** `authorization_code.ttl`: 60 s by default, at most 600 (RFC 6749 §4.1.2; checked at load). */
  readonly authorizationCodeTtlSeconds: number
  /** How long a browser login lasts (the session cookie and its record). */
  readonly sessionTtlSeconds: number
  /** How long a remembered consent lasts. */
  readonly consentTtlSeconds: number
  readonly failuresPerClient: number
  readonly failuresPerIp: number
  readonly throttleWindowSeconds: number
  /** Grants some client is registered for, or may register for (metadata lists the ones implemented). */
  readonly grantTypes: ReadonlySet<GrantType>
  /** `registration` (RFC 7591, RFC 7592): set when enabled. */
  readonly registration?: RegistrationSettings
  /** `client_metadata_documents` (URL client_ids): set when enabled. */
  readonly clientMetadataDocuments?: ClientMetadataDocumentSettings
  /** The top-level `dpop:`: how /token checks DPoP proofs (RFC 9449 §4.3), and its nonces (§8). */
  readonly dpop: DpopSettings
}

/**
 * @param resources the gateway's `resources[].resource` identifiers (RFC 9728), which clients may ask for too
 * @param dpop the top-level `dpop:` section, shared with the gateway
 * @param now the clock of the DPoP nonces (injected by tests)
 */
export function resolveSettings(config: AuthorizationServerConfig, resources: readonly string[] = [], dpop?: DpopConfig,
  now: () => number = Date.now): AuthServerSettings {
  const issuer = config.issuer!
  const audience = config.access_token?.audience ?? [issuer]
  const registration = resolveRegistration(config.registration)
  const clientMetadataDocuments = resolveClientMetadataDocuments(config.client_metadata_documents)
  return {
    issuer,
    prefix: new URL(issuer).pathname.replace(/\/+$/, ''),
    store: {
      type: config.store?.type ?? 'sqlite',
      path: config.store?.path ?? './data/portcullis.db',
      ...(config.store?.url !== undefined && { url: config.store.url }),
      prefix: config.store?.prefix ?? '{portcullis}:',
    },
    algorithm: config.signing?.algorithm ?? 'ES256',
    publishDelayMs: parseDuration(config.signing?.rotation_publish_delay ?? '5m'),
    ...(config.signing?.key_encryption_key !== undefined && { keyEncryption: KeyEncryptionKey.parse(config.signing.key_encryption_key) }),
    accessTokenFormat: config.access_token?.format ?? 'jwt',
    accessTokenTtlSeconds: parseDuration(config.access_token?.ttl ?? '1h') / 1000,
    audience,
    accessTokenClaims: config.access_token?.claims ?? [],
    resourceIndicators: [...new Set([...audience, ...resources])],
    refreshTokenTtlSeconds: parseDuration(config.refresh_token?.ttl ?? '30d') / 1000,
    refreshReuseGraceMs: parseDuration(config.refresh_token?.reuse_grace ?? '0s'),
    authorizationCodeTtlSeconds: Math.max(1, Math.floor(parseDuration(config.authorization_code?.ttl ?? '60s') / 1000)),
    sessionTtlSeconds: Math.max(1, Math.floor(parseDuration(config.session?.ttl ?? '12h') / 1000)),
    consentTtlSeconds: Math.max(1, Math.floor(parseDuration(config.consent?.ttl ?? '90d') / 1000)),
    failuresPerClient: config.throttling?.failures_per_client ?? 10,
    failuresPerIp: config.throttling?.failures_per_ip ?? 100,
    throttleWindowSeconds: parseDuration(config.throttling?.window ?? '1m') / 1000,
    grantTypes: new Set([...(config.clients ?? []).flatMap((client) => client.grant_types), ...registration?.grantTypes ?? [],
      ...(clientMetadataDocuments ? ['authorization_code', 'refresh_token'] as const : [])]),
    ...(registration !== undefined && { registration }),
    ...(clientMetadataDocuments !== undefined && { clientMetadataDocuments }),
    dpop: resolveDpop(dpop, now),
  }
}
