/**
 * RFC 6750 §3.1: the protected resource's refusals of a request's token, each with a `WWW-Authenticate`
 * challenge (Bearer, or DPoP per RFC 9449 §7.1) where a client could do better; and a route's claim conditions.
 */
import { GatewayError, type ErrorCode } from './base.js'

/**
 * RFC 6750 §3.1: the request carried no token at all, so the challenge has no `error`. On a route that
 * requires DPoP (`dpop: required`) the challenge is `DPoP … algs="…"` (RFC 9449 §7.1).
 */
export class MissingToken extends GatewayError {
  readonly code = 'unauthorized'
  readonly status = 401
  override readonly challenge = true
  constructor(readonly dpopAlgs?: string) { super(dpopAlgs === undefined ? 'a Bearer access token is required' : 'a DPoP-bound access token is required') }
}
export class InvalidRequest extends GatewayError {
  readonly code = 'invalid_request'
  readonly status = 400
  override readonly challenge = true
}
/**
 * Why a token was refused, as a bounded code: the `reason` label of portcullis_token_validations_total
 * (docs/metrics.md), where `detail` stays free text for the log.
 */
export type InvalidTokenReason =
  | 'malformed' | 'unknown_issuer' | 'expired' | 'not_yet_valid' | 'bad_signature' | 'unknown_kid'
  | 'disallowed_algorithm' | 'wrong_audience' | 'wrong_issuer' | 'wrong_type' | 'bad_claim' | 'inactive'
  | 'revoked' | 'bad_introspection_response' | 'certificate_mismatch' | 'other'

export class InvalidToken extends GatewayError {
  readonly code = 'invalid_token'
  readonly status = 401
  override readonly challenge = true
  constructor(detail: string, cause?: unknown, readonly reason: InvalidTokenReason = 'other') {
    super('the access token is invalid or expired', { detail, cause })
  }
}
/** Why a DPoP proof was refused (RFC 9449 §4.3): the metrics' `reason` and the log's, never the proof. */
export type DpopProofFailure =
  | 'dpop_multiple' | 'dpop_malformed' | 'dpop_typ' | 'dpop_alg' | 'dpop_jwk' | 'dpop_signature' | 'dpop_htm' | 'dpop_htu'
  | 'dpop_iat' | 'dpop_jti' | 'dpop_ath' | 'dpop_nonce' | 'dpop_replay' | 'dpop_key_mismatch' | 'dpop_missing'
/** Why a DPoP request (or a bound token sent as Bearer) was refused: the metrics' `reason`, never the proof. */
export type DpopRefusalReason = DpopProofFailure
  | 'dpop_bound_as_bearer' | 'dpop_required' | 'dpop_off' | 'dpop_unbound' | 'dpop_replay_unavailable'
  // a decision (`decision:`) for a proxy in front, with no `server.public_url` to check `htu` against
  | 'dpop_no_public_url'

/** How a DPoP refusal is answered (RFC 9449 §7.1), besides its reason and detail. */
export interface DpopRefusalOptions {
  /** The `error` of a 401: `invalid_dpop_proof` for the proof (the default), `invalid_token` for the token's binding. */
  code?: 'invalid_dpop_proof' | 'invalid_token'
  /** 401 (the default), or 503 when the replay store cannot answer. */
  status?: number
  cause?: unknown
  /** A missing or stale nonce: `use_dpop_nonce` (RFC 9449 §8), whatever `code` says. */
  useNonce?: boolean
}

/**
 * RFC 9449 §7.1: a DPoP request refused, with a `WWW-Authenticate: DPoP` challenge (`error`, `algs`), and
 * `DPoP-Nonce` when nonces are on. `invalid_dpop_proof` for the proof, `invalid_token` for the token's
 * binding, `use_dpop_nonce` for a missing or stale nonce; 503 when the replay store cannot answer.
 */
export class DpopRefused extends GatewayError {
  readonly code: ErrorCode
  readonly status: number
  override readonly challenge: boolean
  /** The challenge's `algs`, set by the gate that refused. */
  algs = ''
  /** A fresh nonce for `DPoP-Nonce` when nonces are on. */
  nonce: string | undefined
  /** @param options a {@link DpopRefusalOptions}, or only its `code` */
  constructor(readonly reason: DpopRefusalReason, detail: string, options?: DpopRefusalOptions | DpopRefusalOptions['code']) {
    const { code = 'invalid_dpop_proof', status = 401, cause, useNonce = false }: DpopRefusalOptions =
      typeof options === 'object' ? options : { code: options }
    super(status === 503 ? 'the DPoP proof could not be checked now' : useNonce ? 'a DPoP nonce from this server is required' : detail,
      { detail: `${reason}: ${detail}`, cause })
    this.status = status
    this.code = status === 503 ? 'temporarily_unavailable' : useNonce ? 'use_dpop_nonce' : code
    this.challenge = status === 401
  }
}

export class InsufficientScope extends GatewayError {
  readonly code = 'insufficient_scope'
  readonly status = 403
  override readonly challenge = true
  /** @param condition which rule failed, for the metrics: `scopes.all` or `scopes.any` */
  constructor(readonly required: readonly string[], detail: string, readonly condition = 'scopes') {
    super('the access token lacks a required scope', { detail })
  }
}
/**
 * A route's claim condition (`claims:`) failed: 403 without a Bearer challenge, since no scope the client
 * could ask for would help. Which condition failed (`claims.all[1]`) goes to the log and the metrics only.
 */
export class ClaimsNotSatisfied extends GatewayError {
  readonly code = 'access_denied'
  readonly status = 403
  constructor(readonly condition: string, detail: string) {
    super('the access token does not permit this request', { detail })
  }
}
