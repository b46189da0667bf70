/**
 * Token → principal, whichever way the token must be checked (ARCHITECTURE "Authenticate"):
 * a JWT goes to the issuer its `iss` names (verified with its keys, or introspected when that issuer
 * has no keys configured); an opaque token goes to the first introspecting issuer whose `token_prefix`
 * it carries. Verified JWTs and introspection answers are cached by token hash, and one
 * {@link Authenticator.invalidate} call drops a token, or all of a jti, subject or client, from both caches.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { JWTVerifyGetKey } from 'jose'
import type { Metrics } from '../metrics/metrics.js'
import type { CacheConfig, IssuerConfig } from '../config/schema.js'
import { InvalidToken } from '../errors/oauth-errors.js'
import { IntrospectionClient, type IntrospectionEntry } from './introspection.js'
import { JwtIssuer, decodeUnverified, looksLikeJwt } from './jwt.js'
import type { KeySetStats } from './jwks.js'
import type { Principal } from './principal.js'
import { TokenCache, tokenHash, type CacheStats } from './token-cache.js'

export interface JwtEntry {
  readonly principal: Principal
  readonly expiresAtMs: number
}

/** What to drop from the caches: one token (raw or by its hash), or every token of a jti, subject or client. */
export interface InvalidationSelector {
  token?: string
  /** `tokenHash(token)`: base64url SHA-256, as stores of revoked tokens keep it. */
  tokenHash?: string
  jti?: string
  sub?: string
  client_id?: string
}

/**
 * A revocation check consulted on every request, cache hits included (the embedded authorization server
 * plugs its revocation list in here). True means revoked.
 */
export type RevocationCheck = (principal: Principal, hashOfToken: string) => boolean

/**
 * The embedded authorization server, trusted in-process (ARCHITECTURE "Authenticate"): its keys need no
 * HTTP round trip, its opaque tokens are looked up in its store, and its revocations apply at once.
 */
export interface EmbeddedIssuer {
  /** Its JWT policy, as for a configured issuer (issuer, audience, algorithms, require_typ). */
  readonly policy: IssuerConfig
  readonly getKey: JWTVerifyGetKey
  /** Whether an opaque token is one of the embedded server's (by its prefix). */
  ownsOpaque(token: string): boolean
  /** The principal of a live opaque access token, or undefined. */
  lookupOpaque(hashOfToken: string): Promise<Principal | undefined>
  /** Its deny-list of revoked JWT access tokens. */
  isRevoked(principal: Principal): boolean
}

export interface AuthenticatorOptions {
  issuers: readonly IssuerConfig[]
  /** Where validations are counted (portcullis_token_validations_total). */
  metrics?: Metrics
  embedded?: EmbeddedIssuer
  cache?: CacheConfig
  log: FastifyBaseLogger
  now: () => number
  isRevoked?: RevocationCheck
}

interface IssuerEntry {
  readonly jwt: JwtIssuer | undefined
  readonly introspection: IntrospectionClient | undefined
}

const DEFAULT_MAX_ENTRIES = 100_000

export class Authenticator {
  private readonly issuers = new Map<string, IssuerEntry>()
  private readonly introspecting: IntrospectionClient[] = []
  private readonly jwtCache: TokenCache<JwtEntry> | undefined
  private readonly introspectionCache: TokenCache<IntrospectionEntry>
  /** Distinguishes this issuer policy's JWT cache keys from any other's (STYLE: keyed on policy + token). */
  private readonly policyTag: string
  private readonly isRevoked: RevocationCheck | undefined

  constructor(private readonly options: AuthenticatorOptions) {
    const { issuers, cache, log, now } = options
    const max = cache?.max_entries ?? DEFAULT_MAX_ENTRIES
    this.jwtCache = cache?.jwt === false ? undefined : new TokenCache<JwtEntry>('jwt', max, now)
    this.introspectionCache = new TokenCache<IntrospectionEntry>('introspection', max, now)
    this.policyTag = `${tokenHash(JSON.stringify(issuers)).slice(0, 16)}:`
    this.isRevoked = options.isRevoked
    const embedded = options.embedded
    if (embedded) {
      this.issuers.set(embedded.policy.issuer, { jwt: new JwtIssuer(embedded.policy, log, now, embedded.getKey), introspection: undefined })
    }
    for (const config of issuers) {
      const hasKeys = config.jwks_uri !== undefined || config.jwks_file !== undefined || config.discovery === true
      const introspection = config.introspection ? new IntrospectionClient(config, this.introspectionCache, now, log) : undefined
      if (introspection) this.introspecting.push(introspection)
      this.issuers.set(config.issuer, { jwt: hasKeys ? new JwtIssuer(config, log, now) : undefined, introspection })
    }
  }

  /** Fetch every key set once in the background so the first request does not wait. */
  prefetch(): void {
    for (const { jwt } of this.issuers.values()) jwt?.keySet?.prefetch()
  }

  async authenticate(token: string): Promise<Principal> {
    const hashOfToken = tokenHash(token)
    const principal = looksLikeJwt(token)
      ? await this.authenticateJwt(token, hashOfToken)
      : await this.authenticateOpaque(token, hashOfToken)
    if (this.isRevoked?.(principal, hashOfToken)) throw new InvalidToken('revoked')
    const embedded = this.options.embedded
    if (embedded && principal.issuer === embedded.policy.issuer && embedded.isRevoked(principal)) throw new InvalidToken('revoked')
    return principal
  }

  private async authenticateJwt(token: string, hashOfToken: string): Promise<Principal> {
    // The hot path: a hit costs one hash and one lookup, no decoding.
    const cache = this.jwtCache
    const key = this.policyTag + hashOfToken
    const hit = cache?.get(key)
    if (hit) return hit.principal
    const { iss, header } = decodeUnverified(token)
    const issuer = typeof iss === 'string' ? this.issuers.get(iss) : undefined
    if (!issuer) throw new InvalidToken('unknown_issuer')
    if (!issuer.jwt) return issuer.introspection!.authenticate(token, hashOfToken)
    const jwt = issuer.jwt
    if (!cache) return jwt.verify(token, header)
    // load() caches the entry, unless an invalidation arrived while the verification ran.
    const entry = await cache.load(key, async (): Promise<JwtEntry> => {
      const principal = await jwt.verify(token, header)
      // RFC 9068 requires exp, and verify() insists on it: an entry never outlives the token.
      return { principal, expiresAtMs: principal.expiresAt! * 1000 }
    })
    return entry.principal
  }

  private async authenticateOpaque(token: string, hashOfToken: string): Promise<Principal> {
    // Contract: an opaque token goes first to the embedded issuer when it is one of its own.
    const embedded = this.options.embedded
    if (embedded?.ownsOpaque(token)) {
      const principal = await embedded.lookupOpaque(hashOfToken)
      if (!principal) throw new InvalidToken('inactive')
      return principal
    }
    const client = this.introspecting.find((candidate) => candidate.accepts(token))
    if (!client) throw new InvalidToken('no_introspecting_issuer')
    return client.authenticate(token, hashOfToken)
  }

  /** Drops matching entries from both caches at once; returns how many were dropped. */
  invalidate(selector: InvalidationSelector): number {
    let count = 0
    const hashOfToken = selector.tokenHash ?? (selector.token !== undefined ? tokenHash(selector.token) : undefined)
    if (hashOfToken !== undefined) {
      if (this.jwtCache?.delete(this.policyTag + hashOfToken)) count++
      for (const client of this.introspecting) if (this.introspectionCache.delete(client.cacheKey(hashOfToken))) count++
    }
    const { jti, sub, client_id: clientId } = selector
    if (jti === undefined && sub === undefined && clientId === undefined) return count
    const matches = (principal: Principal) =>
      (jti !== undefined && principal.claims.jti === jti) ||
      (sub !== undefined && principal.subject === sub) ||
      (clientId !== undefined && principal.clientId === clientId)
    count += this.jwtCache?.deleteWhere((entry) => matches(entry.principal)) ?? 0
    count += this.introspectionCache.deleteWhere((entry) => entry.active && matches(entry.principal))
    return count
  }

  cacheStats(): CacheStats[] {
    return [...(this.jwtCache ? [this.jwtCache.stats()] : []), this.introspectionCache.stats()]
  }

  keySetStats(): KeySetStats[] {
    return [...this.issuers.values()].flatMap(({ jwt }) => (jwt?.keySet ? [jwt.keySet.stats()] : []))
  }

  /** Cache keys held now, for tests asserting no raw token is ever a key. */
  cacheKeys(): string[] {
    return [...(this.jwtCache?.keys() ?? []), ...this.introspectionCache.keys()]
  }

  async close(): Promise<void> {
    for (const { jwt } of this.issuers.values()) jwt?.keySet?.close()
    await Promise.all(this.introspecting.map((client) => client.close()))
  }
}
