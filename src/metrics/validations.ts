/**
 * Token validations and introspection calls as the metrics count them: the bounded label values (method,
 * reason, outcome), and the plain-number counts a validation pays on the request path.
 */
import type { DpopRefusalReason, InvalidTokenReason } from '../errors/oauth-errors.js'

/** How a token was validated (the `method` label). */
export type ValidationMethod = 'jwt' | 'introspection' | 'embedded' | 'dpop'

/** Why a token could not be checked at all (result `unavailable`), as opposed to refused (result `invalid`). */
export type UnavailableReason = 'keys_unavailable' | 'introspection_unavailable' | 'internal_error'

/**
 * The `issuer` label of a token whose issuer is not configured (or that does not decode far enough to
 * name one): never the token's own `iss`, which a client could make up.
 */
export const UNKNOWN_ISSUER = 'unknown'

/** What one call to an introspection endpoint came to (the `outcome` label). */
export type IntrospectionOutcome = 'active' | 'inactive' | 'error' | 'timeout'

export const INTROSPECTION_OUTCOMES: readonly IntrospectionOutcome[] = ['active', 'inactive', 'error', 'timeout']

/**
 * The validations of one (issuer, method), counted in plain numbers: a JWT cache hit pays one increment,
 * with no label object and no label hash built; the Metrics of metrics.ts export them on scrape.
 */
export class ValidationCounts {
  /** Result `valid`, reason `ok` (cache hits included). */
  valid = 0
  readonly refused = new Map<InvalidTokenReason | UnavailableReason | DpopRefusalReason, number>()
  constructor(readonly issuer: string, readonly method: ValidationMethod) {}

  refuse(reason: InvalidTokenReason | UnavailableReason | DpopRefusalReason): void {
    this.refused.set(reason, (this.refused.get(reason) ?? 0) + 1)
  }
}

/** Records one introspection call: its outcome and how long it took. */
export type IntrospectionRecorder = (outcome: IntrospectionOutcome, seconds: number) => void
