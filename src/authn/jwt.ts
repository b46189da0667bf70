/**
 * JWT access tokens of the configured issuers: the issuer is chosen by the token's `iss` (exact match),
 * then jose verifies signature, algorithm allow-list, `aud`, `exp`/`nbf` with skew, `typ` and `crit`.
 */
import {
  decodeJwt, decodeProtectedHeader, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions,
  type ProtectedHeaderParameters,
} from 'jose'
import { pathToFileURL } from 'node:url'
import type { FastifyBaseLogger } from 'fastify'
import type { IssuerConfig, JwsAlgorithm } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { InvalidToken, TemporarilyUnavailable, type InvalidTokenReason } from '../errors/oauth-errors.js'
import { KeySetUnavailable, RemoteKeySet } from './jwks.js'
import { readScopes, type Principal } from './principal.js'

/** The reason codes logged for a rejected JWT. */
export type JwtRejection =
  | 'malformed' | 'unknown_issuer' | 'expired' | 'not_yet_valid' | 'issued_in_future' | 'wrong_audience'
  | 'wrong_typ' | 'missing_claim' | 'bad_claim' | 'bad_signature' | 'unknown_kid' | 'algorithm_not_allowed'
  | 'crit_header' | 'bad_scope_claim'

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
}

/** The InvalidToken for a rejection: the precise code as its detail, the counted one as its reason. */
function rejectJwt(rejection: JwtRejection, cause?: unknown): InvalidToken {
  return new InvalidToken(rejection, cause, COUNTED_AS[rejection])
}

export const DEFAULT_ALGORITHMS: readonly JwsAlgorithm[] = ['RS256', 'ES256', 'EdDSA', 'PS256']

/** One issuer's JWT policy and key set. */
export class JwtIssuer {
  /** The remote key set; undefined for the embedded issuer, whose keys are in-process. */
  readonly keySet: RemoteKeySet | undefined
  private readonly getKey: JWTVerifyGetKey
  private readonly algorithms: string[]
  private readonly skewSeconds: number
  constructor(readonly config: IssuerConfig, log: FastifyBaseLogger, private readonly now: () => number,
    localKeys?: JWTVerifyGetKey) {
    this.algorithms = [...(config.algorithms ?? DEFAULT_ALGORITHMS)]
    this.skewSeconds = parseDuration(config.clock_skew ?? '30s') / 1000
    if (localKeys) {
      this.keySet = undefined
      this.getKey = localKeys
      return
    }
    const keySet = new RemoteKeySet({
      issuer: config.issuer,
      ...(config.jwks_uri !== undefined && { jwksUri: config.jwks_uri }),
      ...(config.jwks_file !== undefined && { jwksUri: pathToFileURL(config.jwks_file).href }),
      discovery: config.discovery ?? false,
      cooldownMs: parseDuration(config.jwks_cooldown ?? '30s'),
      maxAgeMs: parseDuration(config.jwks_max_age ?? '10m'),
      fetchTimeoutMs: 5000,
      now,
      log,
    })
    this.keySet = keySet
    this.getKey = keySet.getKey
  }

  async verify(token: string, header: ProtectedHeaderParameters): Promise<Principal> {
    // RFC 7515 §4.1.11: we understand no extension, so any `crit` makes the token unacceptable.
    if (header.crit !== undefined) throw rejectJwt('crit_header')
    const nowSeconds = Math.floor(this.now() / 1000)
    const options: JWTVerifyOptions = {
      issuer: this.config.issuer,
      audience: this.config.audience,
      algorithms: this.algorithms,
      clockTolerance: this.skewSeconds,
      currentDate: new Date(nowSeconds * 1000),
      requiredClaims: ['exp'],
      ...(this.config.require_typ !== undefined && { typ: this.config.require_typ }),
    }
    let payload: JWTPayload
    try {
      payload = await verifyWithKeySet(token, this.getKey, options)
    } catch (error) {
      if (error instanceof KeySetUnavailable) throw new TemporarilyUnavailable(error.message, error.retryAfterSeconds, error)
      throw rejectJwt(rejectionOf(error), error)
    }
    // jose checks `iat` only with maxTokenAge; a token issued in the future (beyond skew) is refused too.
    if (payload.iat !== undefined && typeof payload.iat !== 'number') throw rejectJwt('bad_claim')
    if (typeof payload.iat === 'number' && payload.iat > nowSeconds + this.skewSeconds) {
      throw rejectJwt('issued_in_future')
    }
    const scopes = readScopes(payload as Record<string, unknown>, this.config.scope_claim)
    if (!scopes) throw rejectJwt('bad_scope_claim')
    const clientId = payload.client_id ?? payload.azp
    return {
      issuer: this.config.issuer,
      subject: typeof payload.sub === 'string' ? payload.sub : undefined,
      clientId: typeof clientId === 'string' ? clientId : undefined,
      scopes,
      expiresAt: payload.exp,
      claims: payload,
    }
  }
}

/**
 * RFC 7517 §4.5: a token without `kid` can match several keys of its type (an issuer mid-rotation);
 * jose then hands back every candidate and the signature decides. One valid signature is enough; a
 * claim failure with the right key is reported as such, not as a bad signature.
 */
async function verifyWithKeySet(token: string, getKey: JWTVerifyGetKey, options: JWTVerifyOptions): Promise<JWTPayload> {
  try {
    return (await jwtVerify(token, getKey, options)).payload
  } catch (error) {
    if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error
    let failure: unknown = error
    for await (const key of error) {
      try {
        return (await jwtVerify(token, key, options)).payload
      } catch (attempt) {
        if (!(attempt instanceof errors.JWSSignatureVerificationFailed)) throw attempt
        failure = attempt
      }
    }
    throw failure
  }
}

function rejectionOf(error: unknown): JwtRejection {
  if (error instanceof errors.JWTExpired) return 'expired'
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.reason === 'missing') return 'missing_claim'
    if (error.reason !== 'check_failed') return 'bad_claim'
    switch (error.claim) {
      case 'nbf': return 'not_yet_valid'
      case 'aud': return 'wrong_audience'
      case 'iss': return 'unknown_issuer'
      case 'typ': return 'wrong_typ'
      default: return 'bad_claim'
    }
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'bad_signature'
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) return 'unknown_kid'
  if (error instanceof errors.JOSEAlgNotAllowed || error instanceof errors.JOSENotSupported) return 'algorithm_not_allowed'
  return 'malformed'
}

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/

/** JWS compact serialization: three base64url segments (anything else is an opaque token). */
export function looksLikeJwt(token: string): boolean {
  return COMPACT_JWS.test(token)
}

/** The unverified `iss` (to pick the issuer) and protected header; a token that does not decode is invalid. */
export function decodeUnverified(token: string): { iss: unknown; header: ProtectedHeaderParameters } {
  try {
    return { iss: decodeJwt(token).iss, header: decodeProtectedHeader(token) }
  } catch (error) {
    throw rejectJwt('malformed', error)
  }
}
