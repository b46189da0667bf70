/**
 * Token → principal, whichever way the token must be checked:
 * a JWT goes to the issuer its `iss` names (verified with its keys, or introspected when that issuer
 * has no keys configured); an opaque token goes to the first introspecting issuer whose `token_prefix`
 * it carries. Verified JWTs and introspection answers are cached by token hash, and one
 * {@link Authenticator.invalidate} call drops a token, or all of a jti, subject or client, from both caches.
 */
import type { FastifyBaseLogger } from 'fastify'
import { UNKNOWN_ISSUER, ValidationCounts, type Metrics, type UnavailableReason, type ValidationMethod } from '../metrics/metrics.js'
import type { CacheConfig, IssuerConfig } from '../config/schema.js'
import { InvalidToken, TemporarilyUnavailable, type InvalidTokenReason } from '../errors/oauth-errors.js'
import { IntrospectionClient, type IntrospectionEntry } from './introspection.js'
import { JwtIssuer, decodeUnverified, looksLikeJwt, refuseUnsecured } from './jwt.js'
import type { KeySetStats } from './jwks.js'
import type { Principal } from '../common/principal.js'
import { TokenCache, tokenHash, type CacheStats } from './token-cache.js'
import { hasEmbeddedPrefix, withEmbeddedClaims, type EmbeddedIssuer } from './embedded.js'
import { principalMatcher, type InvalidationSelector } from './invalidation.js'

export type { EmbeddedIssuer } from './embedded.js'
export type { InvalidationSelector } from './invalidation.js'

export interface JwtEntry {
  readonly principal: Principal
  readonly expiresAtMs: number
  /** The cache's mark of a hit since its last pass (second-chance.ts). */
  visited: boolean
  /** Where a cache hit is counted: its issuer's, found once at verification. */
  readonly counts: ValidationCounts
}

/**
 * A revocation check consulted on every request, cache hits included (the embedded authorization server
 * plugs its revocation list in here). True means revoked.
 */
export type RevocationCheck = (principal: Principal, hashOfToken: string) => boolean

export interface AuthenticatorOptions {
  issuers: readonly IssuerConfig[]
  /** Where validations are counted (portcullis_token_validations_total). */
  metrics?: Metrics
  embedded?: EmbeddedIssuer
  cache?: CacheConfig
  log: FastifyBaseLogger
  now: () => number
  isRevoked?: RevocationCheck
  /** The top-level claims principals keep: what route conditions and claim headers read (rules/compile.ts). */
  keptClaims?: readonly string[]
  /** `server.allow_insecure_http`: a `jwks_uri` that discovery finds may be http:// off loopback. */
  allowInsecureHttp?: boolean
}

/** How one issuer's tokens are checked, each way with where its verdicts are counted. */
interface IssuerEntry {
  readonly jwt: { readonly verifier: JwtIssuer; readonly counts: ValidationCounts } | undefined
  readonly introspection: Introspecting | undefined
}

interface Introspecting {
  readonly client: IntrospectionClient
  readonly counts: ValidationCounts
}

/** Filled in as a validation learns whose token it is; the issuer stays unknown until the config names it. */
interface Attempt {
  counts: ValidationCounts
}

const DEFAULT_MAX_ENTRIES = 100_000

export class Authenticator {
  private readonly issuers = new Map<string, IssuerEntry>()
  private readonly introspecting: Introspecting[] = []
  private readonly jwtCache: TokenCache<JwtEntry> | undefined
  private readonly introspectionCache: TokenCache<IntrospectionEntry>
  private readonly isRevoked: RevocationCheck | undefined
  private readonly unknownJwt: ValidationCounts
  private readonly unknownOpaque: ValidationCounts
  private readonly embeddedCounts: ValidationCounts | undefined

  constructor(private readonly options: AuthenticatorOptions) {
    const { issuers, cache, log, now, metrics } = options
    const kept = options.keptClaims ?? []
    // Without metrics, counted into objects nobody reads: the paths stay the same.
    const countsOf = (issuer: string, method: ValidationMethod) =>
      metrics?.validations(issuer, method) ?? new ValidationCounts(issuer, method)
    this.unknownJwt = countsOf(UNKNOWN_ISSUER, 'jwt')
    this.unknownOpaque = countsOf(UNKNOWN_ISSUER, 'introspection')
    const max = cache?.max_entries ?? DEFAULT_MAX_ENTRIES
    this.jwtCache = cache?.jwt === false ? undefined : new TokenCache<JwtEntry>('jwt', max, now)
    this.introspectionCache = new TokenCache<IntrospectionEntry>('introspection', max, now)
    this.isRevoked = options.isRevoked
    const embedded = options.embedded
    this.embeddedCounts = embedded && countsOf(embedded.policy.issuer, 'embedded')
    if (embedded) {
      const verifier = new JwtIssuer(embedded.policy, { log, now, local: { getKey: embedded.getKey, ownAudience: embedded.ownAudience }, kept })
      this.issuers.set(embedded.policy.issuer, { jwt: { verifier, counts: this.embeddedCounts! }, introspection: undefined })
    }
    for (const config of issuers) {
      const hasKeys = config.jwks_uri !== undefined || config.jwks_file !== undefined || config.discovery === true
      const introspection = config.introspection
        ? { client: new IntrospectionClient(config, { cache: this.introspectionCache, now, log, metrics, kept }), counts: countsOf(config.issuer, 'introspection') }
        : undefined
      if (introspection) this.introspecting.push(introspection)
      const jwt = hasKeys ? { verifier: new JwtIssuer(config, { log, now, kept, allowInsecureHttp: options.allowInsecureHttp }), counts: countsOf(config.issuer, 'jwt') } : undefined
      this.issuers.set(config.issuer, { jwt, introspection })
    }
  }

  /** Fetch every key set once in the background so the first request does not wait. */
  prefetch(): void {
    for (const { jwt } of this.issuers.values()) jwt?.verifier.keySet?.prefetch()
  }

  /**
   * The token's principal, or the error to answer with (InvalidToken, TemporarilyUnavailable); every verdict
   * is counted (cache hits included). A verified-JWT cache hit
   * answers synchronously (a Principal, or a throw), everything else with a promise: the hot path costs one
   * hash, one lookup and one increment (of a plain number), with no decoding and no promise.
   * @param hashOfToken `tokenHash(token)`, when the caller has it (bearer.ts keeps a connection's last one): the JWT
   *   cache's key. The cache is this authenticator's own (a reload that changes `issuers` or `cache` builds another),
   *   so the token's hash alone names its verdict.
   */
  authenticate(token: string, hashOfToken = tokenHash(token)): Principal | Promise<Principal> {
    const isJwt = looksLikeJwt(token)
    const hit = isJwt ? this.jwtCache?.get(hashOfToken) : undefined
    if (hit) return this.admit(hit.principal, hashOfToken, hit.counts)
    return this.authenticateUncached(token, hashOfToken, isJwt)
  }

  private async authenticateUncached(token: string, hashOfToken: string, isJwt: boolean): Promise<Principal> {
    const attempt: Attempt = { counts: isJwt ? this.unknownJwt : this.unknownOpaque }
    let principal: Principal
    try {
      principal = isJwt
        ? await this.authenticateJwt(token, hashOfToken, attempt)
        : await this.authenticateOpaque(token, hashOfToken, attempt)
    } catch (error) {
      attempt.counts.refuse(reasonOf(error, attempt.counts.method))
      throw error
    }
    return this.admit(principal, hashOfToken, attempt.counts)
  }

  /** A principal found valid, unless revoked since (checked on every request, cache hits included). */
  private admit(principal: Principal, hashOfToken: string, counts: ValidationCounts): Principal {
    const embedded = this.options.embedded
    if (this.isRevoked?.(principal, hashOfToken) ||
        (embedded && principal.issuer === embedded.policy.issuer && embedded.isRevoked(principal))) {
      counts.refuse('revoked')
      throw new InvalidToken('revoked', undefined, 'revoked')
    }
    counts.valid++
    return principal
  }

  private async authenticateJwt(token: string, hashOfToken: string, attempt: Attempt): Promise<Principal> {
    const decoded = decodeUnverified(token)
    const iss = decoded.payload.iss
    const issuer = typeof iss === 'string' ? this.issuers.get(iss) : undefined
    if (!issuer) throw new InvalidToken('unknown_issuer', undefined, 'unknown_issuer')
    if (!issuer.jwt) {
      const introspection = issuer.introspection!
      attempt.counts = introspection.counts
      refuseUnsecured(decoded)
      return introspection.client.authenticate(token, hashOfToken)
    }
    const { verifier: jwt, counts } = issuer.jwt
    attempt.counts = counts
    const cache = this.jwtCache
    if (!cache) return jwt.verify(decoded)
    // load() caches the entry, unless an invalidation arrived while the verification ran.
    const entry = await cache.load(hashOfToken, async (): Promise<JwtEntry> => {
      const principal = await jwt.verify(decoded)
      // RFC 9068 requires exp, and verify() insists on it: an entry never outlives the token.
      return { principal, expiresAtMs: principal.expiresAt! * 1000, counts, visited: false }
    })
    return entry.principal
  }

  private async authenticateOpaque(token: string, hashOfToken: string, attempt: Attempt): Promise<Principal> {
    // Contract: an opaque token goes first to the embedded issuer when it is one of its own.
    const embedded = this.options.embedded
    if (embedded?.ownsOpaque(token)) {
      attempt.counts = this.embeddedCounts!
      const principal = await embedded.lookupOpaque(hashOfToken)
      if (!principal) throw new InvalidToken('inactive', undefined, 'inactive')
      return withEmbeddedClaims(principal, this.options.keptClaims)
    }
    if (hasEmbeddedPrefix(token)) {
      if (!embedded) throw new InvalidToken('embedded_token_prefix', undefined, 'unknown_issuer')
      // One of ours, but not an access token (a refresh token or a device code): not active as a Bearer.
      attempt.counts = this.embeddedCounts!
      throw new InvalidToken('not_an_access_token', undefined, 'inactive')
    }
    const introspection = this.introspecting.find((candidate) => candidate.client.accepts(token))
    if (!introspection) throw new InvalidToken('no_introspecting_issuer', undefined, 'unknown_issuer')
    attempt.counts = introspection.counts
    return introspection.client.authenticate(token, hashOfToken)
  }

  /** Drops matching entries from both caches at once; returns how many were dropped. */
  invalidate(selector: InvalidationSelector): number {
    let count = 0
    const hashOfToken = selector.tokenHash ?? (selector.token !== undefined ? tokenHash(selector.token) : undefined)
    if (hashOfToken !== undefined) {
      if (this.jwtCache?.delete(hashOfToken)) count++
      for (const { client } of this.introspecting) if (this.introspectionCache.delete(client.cacheKey(hashOfToken))) count++
    }
    const matches = principalMatcher(selector)
    if (!matches) return count
    count += this.jwtCache?.deleteWhere((entry) => matches(entry.principal)) ?? 0
    count += this.introspectionCache.deleteWhere((entry) => entry.active && matches(entry.principal))
    return count
  }

  cacheStats(): CacheStats[] {
    return [...(this.jwtCache ? [this.jwtCache.stats()] : []), this.introspectionCache.stats()]
  }

  keySetStats(): KeySetStats[] {
    return [...this.issuers.values()].flatMap(({ jwt }) => (jwt?.verifier.keySet ? [jwt.verifier.keySet.stats()] : []))
  }

  /** Cache keys held now, for tests asserting no raw token is ever a key. */
  cacheKeys(): string[] {
    return [...(this.jwtCache?.keys() ?? []), ...this.introspectionCache.keys()]
  }

  async close(): Promise<void> {
    for (const { jwt } of this.issuers.values()) jwt?.verifier.keySet?.close()
    await Promise.all(this.introspecting.map(({ client }) => client.close()))
  }
}

/** The bounded code an error is counted under (never its free-text detail). */
function reasonOf(error: unknown, method: ValidationMethod): InvalidTokenReason | UnavailableReason {
  if (error instanceof InvalidToken) return error.reason
  if (error instanceof TemporarilyUnavailable) return method === 'introspection' ? 'introspection_unavailable' : 'keys_unavailable'
  return 'internal_error'
}
