/**
 * JWT access tokens of the configured issuers: the issuer is chosen by the token's `iss` (exact match),
 * then the signature is verified on node:crypto with a key from jose's key set, and the algorithm allow-list,
 * `aud`, `exp`/`nbf`/`iat` with skew, `typ` and `crit` are checked as jose's jwtVerify checks them.
 */
import { Interner } from './intern.js'
import { errors, type JWTVerifyGetKey, type ProtectedHeaderParameters } from 'jose'
import { isUtf8 } from 'node:buffer'
import { pathToFileURL } from 'node:url'
import type { FastifyBaseLogger } from 'fastify'
import type { IssuerConfig, JwsAlgorithm } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { InvalidToken, TemporarilyUnavailable, type InvalidTokenReason } from '../errors/oauth-errors.js'
import { KeySetUnavailable, RemoteKeySet } from './jwks.js'
import { UnusableKey, isSupportedAlgorithm, verifyJwsSignature } from './jws-verify.js'
import { effectiveAlgorithms, issuerClaims, readClientId, readPermissions, unmetIssuerCondition, type IssuerClaims } from '../claims/issuer.js'
import { readClaim } from '../claims/path.js'
import { audienceMatches, keepClaims, readConfirmation, readScopes, type Principal } from '../common/principal.js'

/** The reason codes logged for a rejected JWT. */
export type JwtRejection =
  | 'malformed' | 'unknown_issuer' | 'expired' | 'not_yet_valid' | 'issued_in_future' | 'wrong_audience'
  | 'wrong_typ' | 'missing_claim' | 'bad_claim' | 'bad_signature' | 'unknown_kid' | 'algorithm_not_allowed'
  | 'crit_header' | 'bad_scope_claim' | 'bad_cnf_claim'

/** Each logged rejection as the coarser code it is counted under (docs/metrics.md, token validations). */
const COUNTED_AS: Readonly<Record<JwtRejection, InvalidTokenReason>> = {
  malformed: 'malformed',
  unknown_issuer: 'unknown_issuer',
  expired: 'expired',
  not_yet_valid: 'not_yet_valid',
  issued_in_future: 'not_yet_valid',
  wrong_audience: 'wrong_audience',
  wrong_typ: 'wrong_type',
  missing_claim: 'bad_claim',
  bad_claim: 'bad_claim',
  bad_signature: 'bad_signature',
  unknown_kid: 'unknown_kid',
  algorithm_not_allowed: 'disallowed_algorithm',
  // RFC 7515 §4.1.11: a header we must understand and do not is as unusable as one that does not decode.
  crit_header: 'malformed',
  bad_scope_claim: 'bad_claim',
  bad_cnf_claim: 'bad_claim',
}

/** The InvalidToken for a rejection: the precise code as its detail, the counted one as its reason. */
function rejectJwt(rejection: JwtRejection, cause?: unknown): InvalidToken {
  return new InvalidToken(rejection, cause, COUNTED_AS[rejection])
}

export const DEFAULT_ALGORITHMS: readonly JwsAlgorithm[] = ['RS256', 'ES256', 'EdDSA', 'PS256']

/** The embedded issuer, verified in-process: its keys, and the audience it accepts outside resources. */
export interface LocalIssuer {
  readonly getKey: JWTVerifyGetKey
  readonly ownAudience: readonly string[]
}

/** What a JwtIssuer needs besides its issuer's config. */
export interface JwtIssuerContext {
  readonly log: FastifyBaseLogger
  readonly now: () => number
  /** The embedded issuer's in-process keys and own audience; undefined for a remote issuer. */
  readonly local?: LocalIssuer | undefined
  /** The top-level claims a principal keeps (what route conditions and claim headers read). */
  readonly kept?: readonly string[] | undefined
  /** `server.allow_insecure_http`: a `jwks_uri` found by discovery may be http:// off loopback. */
  readonly allowInsecureHttp?: boolean | undefined
}

/** One issuer's JWT policy and key set. */
export class JwtIssuer {
  /** The remote key set; undefined for the embedded issuer, whose keys are in-process. */
  readonly keySet: RemoteKeySet | undefined
  private readonly getKey: JWTVerifyGetKey
  private readonly algorithms: string[]
  private readonly skewSeconds: number
  private readonly claims: IssuerClaims
  private readonly interned = new Interner()
  /** The embedded issuer's `access_token.audience`: a token naming none of it is `resourceOnly`; undefined for others. */
  private readonly ownAudience: readonly string[] | undefined
  private readonly now: () => number
  private readonly kept: readonly string[]

  constructor(readonly config: IssuerConfig, context: JwtIssuerContext) {
    const { log, local, now } = context
    this.now = now
    this.kept = context.kept ?? []
    this.algorithms = [...(effectiveAlgorithms(config) ?? DEFAULT_ALGORITHMS)]
    this.claims = issuerClaims(config)
    this.skewSeconds = parseDuration(config.clock_skew ?? '30s') / 1000
    this.ownAudience = local?.ownAudience
    if (local) {
      this.keySet = undefined
      this.getKey = local.getKey
      return
    }
    const keySet = new RemoteKeySet({
      issuer: config.issuer,
      ...(config.jwks_uri !== undefined && { jwksUri: config.jwks_uri }),
      ...(config.jwks_file !== undefined && { jwksUri: pathToFileURL(config.jwks_file).href }),
      discovery: config.discovery ?? false,
      allowInsecureHttp: context.allowInsecureHttp === true,
      cooldownMs: parseDuration(config.jwks_cooldown ?? '30s'),
      maxAgeMs: parseDuration(config.jwks_max_age ?? '10m'),
      fetchTimeoutMs: 5000,
      now,
      log,
    })
    this.keySet = keySet
    this.getKey = keySet.getKey
  }

  /**
   * The checks of jose's jwtVerify, in its order (header, key, signature, then claims), with the signature
   * on node:crypto (jws-verify.ts): `crit`, the alg allow-list, the key by kid, the signature, `typ`,
   * `iss`, `aud`, `exp` (required) and `nbf` with skew, and `iat` not in the future.
   */
  async verify(jwt: DecodedJwt): Promise<Principal> {
    const { header, payload } = jwt
    // RFC 7515 §4.1.11: we understand no extension, so any `crit` makes the token unacceptable.
    if (header.crit !== undefined) throw rejectJwt('crit_header')
    const alg = header.alg
    if (typeof alg !== 'string' || alg === '') throw rejectJwt('malformed')
    if (!this.algorithms.includes(alg) || !isSupportedAlgorithm(alg)) throw rejectJwt('algorithm_not_allowed')
    try {
      await this.verifySignature(alg, jwt)
    } catch (error) {
      if (error instanceof KeySetUnavailable) throw new TemporarilyUnavailable(error.message, error.retryAfterSeconds, error)
      throw error instanceof InvalidToken ? error : rejectJwt(rejectionOf(error), error)
    }
    const nowSeconds = Math.floor(this.now() / 1000)
    this.checkClaims(header, payload, nowSeconds)
    const { permissions, clientId, conditions } = this.claims
    const scopes = permissions ? readPermissions(payload, permissions) : readScopes(payload, undefined)
    if (!scopes) throw rejectJwt('bad_scope_claim')
    const unmet = unmetIssuerCondition(conditions, payload)
    if (unmet !== undefined) throw new InvalidToken(`unmet_issuer_condition ${unmet}`, undefined, 'bad_claim')
    const confirmation = readConfirmation(payload)
    if (confirmation === null) throw rejectJwt('bad_cnf_claim')
    const { jkt, x5t } = confirmation
    const own = this.ownAudience
    // One literal with every member, in one order: one shape, its members in the object (a cached principal is
    // smaller so); what many tokens repeat (client id, scope list) shared (intern.ts).
    return {
      issuer: this.config.issuer,
      subject: typeof payload.sub === 'string' ? payload.sub : undefined,
      clientId: this.interned.string(readClientId(payload, clientId)),
      scopes: this.interned.list(scopes),
      expiresAt: payload.exp as number,
      jti: typeof payload.jti === 'string' ? payload.jti : undefined,
      claims: keepClaims(payload, this.kept),
      jkt,
      x5t,
      // RFC 8707: issued for resources only; checkClaims has already found `aud` among the issuer's audiences.
      resourceOnly: own !== undefined && !audienceMatches(payload.aud, own) ? true : undefined,
    }
  }

  /**
   * RFC 7517 §4.5: a token without `kid` can match several keys of its type (an issuer mid-rotation);
   * jose's key set then hands back every candidate and the signature decides. One valid signature is enough.
   */
  private async verifySignature(alg: JwsAlgorithm, jwt: DecodedJwt): Promise<void> {
    let key: unknown
    try {
      key = await this.getKey({ ...jwt.header, alg }, jwt.parts)
    } catch (error) {
      if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error
      for await (const candidate of error) {
        if (verifyJwsSignature(alg, candidate, jwt.signingInput, jwt.signature)) return
      }
      throw rejectJwt('bad_signature')
    }
    if (!verifyJwsSignature(alg, key, jwt.signingInput, jwt.signature)) throw rejectJwt('bad_signature')
  }

  /** jose's claim checks (validateClaimsSet), in its order, with our options; then `iat`, which jose checks only with maxTokenAge. */
  private checkClaims(header: JwtHeader, payload: JwtClaims, nowSeconds: number): void {
    const typ = this.config.require_typ
    if (typ !== undefined && (typeof header.typ !== 'string' || normalizeTyp(header.typ) !== normalizeTyp(typ))) throw rejectJwt('wrong_typ')
    const audiences = this.config.audience
    // `audience_claim` (Cognito: client_id) stands in for `aud`, which such tokens do not carry.
    const audiencePath = this.claims.audience
    for (const claim of audiences === undefined || audiencePath ? ['iss', 'exp'] : ['iss', 'aud', 'exp']) {
      if (!Object.hasOwn(payload, claim)) throw rejectJwt('missing_claim')
    }
    const audience = audiencePath ? readClaim(payload, audiencePath) : payload.aud
    if (audiences !== undefined && audiencePath && audience === undefined) throw rejectJwt('missing_claim')
    if (payload.iss !== this.config.issuer) throw rejectJwt('unknown_issuer')
    if (audiences !== undefined && !audienceMatches(audience, audiences)) throw rejectJwt('wrong_audience')
    const skew = this.skewSeconds
    const nbf = numericDate(payload, 'nbf')
    if (nbf !== undefined && nbf > nowSeconds + skew) throw rejectJwt('not_yet_valid')
    const exp = numericDate(payload, 'exp')
    if (exp !== undefined && exp <= nowSeconds - skew) throw rejectJwt('expired')
    const iat = numericDate(payload, 'iat')
    if (iat !== undefined && iat > nowSeconds + skew) throw rejectJwt('issued_in_future')
  }
}

/** A claim that must be a NumericDate when present (RFC 7519 §2). */
function numericDate(payload: JwtClaims, claim: 'exp' | 'nbf' | 'iat'): number | undefined {
  const value = payload[claim]
  if (value === undefined) return undefined
  if (typeof value !== 'number' || !Number.isFinite(value)) throw rejectJwt('bad_claim')
  return value
}

/** RFC 7515 §4.1.9: `at+jwt` stands for `application/at+jwt`, compared without case. */
function normalizeTyp(value: string): string {
  const lower = value.toLowerCase()
  return lower.includes('/') ? lower : `application/${lower}`
}

function rejectionOf(error: unknown): JwtRejection {
  if (error instanceof UnusableKey) return 'unknown_kid'
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) return 'unknown_kid'
  if (error instanceof errors.JOSEAlgNotAllowed || error instanceof errors.JOSENotSupported) return 'algorithm_not_allowed'
  return 'malformed'
}

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/

/**
 * Any token of three segments (exactly two dots, whatever is between them) is a JWT: decoded, and refused
 * as malformed when it is not a signed compact JWS, never taken for an opaque token and introspected
 * (an unsecured `header.payload.`, alg none, must never be sent to a third party's introspection endpoint). Runs on every request: no regex.
 */
export function looksLikeJwt(token: string): boolean {
  const first = token.indexOf('.')
  if (first < 0) return false
  const second = token.indexOf('.', first + 1)
  return second >= 0 && token.indexOf('.', second + 1) < 0
}

export type JwtHeader = ProtectedHeaderParameters
export type JwtClaims = Record<string, unknown>

/**
 * RFC 7519 §6: an unsecured JWT (`alg: none`) is never an access token, whoever would check it: refused
 * here before a JWT of an issuer without keys is sent to that issuer's introspection endpoint.
 */
export function refuseUnsecured(jwt: DecodedJwt): void {
  const alg = jwt.header.alg
  if (typeof alg !== 'string' || alg === '') throw rejectJwt('malformed')
  if (alg.toLowerCase() === 'none') throw rejectJwt('algorithm_not_allowed')
}

/** A compact JWS taken apart, nothing verified yet. */
export interface DecodedJwt {
  readonly header: JwtHeader
  readonly payload: JwtClaims
  /** The first two segments, as signed. */
  readonly signingInput: string
  readonly signature: Buffer
  /** The segments as jose's key resolvers receive them. */
  readonly parts: { readonly protected: string; readonly payload: string; readonly signature: string }
}

/** A segment that must decode to a JSON object (RFC 7515 §5.2 step 3 for the header, RFC 7519 §7.2 for the claims). */
function jsonObject(segment: string): Record<string, unknown> {
  const bytes = Buffer.from(segment, 'base64url')
  if (!isUtf8(bytes)) throw new TypeError('not UTF-8')
  const value: unknown = JSON.parse(bytes.toString('utf8'))
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('not a JSON object')
  return value as Record<string, unknown>
}

/**
 * The signature segment's bytes, only if the segment is their one base64url spelling. Node's decoder
 * ignores a dangling last character and nonzero trailing bits, so without this check one signed token
 * would have several spellings, each with its own hash, and a token revoked or cached by its hash could
 * come back as another. (The other two segments are signed as written: a respelling fails the signature.)
 */
function canonicalSignature(segment: string): Buffer {
  const bytes = Buffer.from(segment, 'base64url')
  if (bytes.toString('base64url') !== segment) throw new TypeError('signature is not canonical base64url')
  return bytes
}

/** The header and claims (`iss` picks the issuer) of a compact JWS; a token that does not decode is invalid. */
export function decodeUnverified(token: string): DecodedJwt {
  // RFC 7515 §7.1: three non-empty base64url segments (an empty signature is an unsecured JWT, never accepted).
  if (!COMPACT_JWS.test(token)) throw rejectJwt('malformed')
  const first = token.indexOf('.')
  const second = token.indexOf('.', first + 1)
  const parts = { protected: token.slice(0, first), payload: token.slice(first + 1, second), signature: token.slice(second + 1) }
  try {
    return {
      header: jsonObject(parts.protected) as JwtHeader,
      payload: jsonObject(parts.payload),
      signingInput: token.slice(0, second),
      signature: canonicalSignature(parts.signature),
      parts,
    }
  } catch (error) {
    throw rejectJwt('malformed', error)
  }
}
