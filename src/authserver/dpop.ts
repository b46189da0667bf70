/**
 * DPoP (RFC 9449) at the token endpoint: the request's one `DPoP` header, checked as §4.3 says
 * (src/dpop/proof.ts) for a POST to the token endpoint's URL as the metadata names it, then spent in the
 * replay cache (§11.1). What a grant gets is the proof's key thumbprint: its access token is bound to it
 * (`cnf.jkt`, §6), and so are a public client's refresh tokens (§5).
 *
 * Errors are 400 (§5.1): `invalid_dpop_proof` for a bad proof, `use_dpop_nonce` for a missing or stale nonce
 * (§8), and `invalid_request` when a client registered with `dpop_bound_access_tokens` sends none (§5.2).
 * Their descriptions name the check that failed, never a value of the proof.
 */
import type { FastifyRequest } from 'fastify'
import { DpopProofError, proofHeader, verifyProof, type DpopFailure, type VerifiedProof } from '../dpop/proof.js'
import { GatewayError, InvalidRequest } from '../errors/oauth-errors.js'
import type { RegisteredClient } from './registered-client.js'
import type { AuthServerContext } from './context.js'

/** RFC 9449 §5.1: the proof is missing, malformed, fails a check, or was used before. */
export class InvalidDpopProof extends GatewayError {
  readonly code = 'invalid_dpop_proof'
  readonly status = 400
  /** @param reason bounded, for the log (`detail`); the description is what the client reads */
  constructor(readonly reason: DpopFailure, description: string) { super(description, { detail: reason }) }
}

/** RFC 9449 §8: the proof lacks a nonce this server still accepts; the response's DPoP-Nonce is the one to use. */
export class UseDpopNonce extends GatewayError {
  readonly code = 'use_dpop_nonce'
  readonly status = 400
  constructor() { super('the DPoP proof must carry the nonce from the DPoP-Nonce header', { detail: 'dpop_nonce' }) }
}

/**
 * The verified proof of a token request, its jti spent; undefined when the request carries none and the
 * client does not require one. Throws InvalidDpopProof, UseDpopNonce, InvalidRequest, or the store's
 * TemporarilyUnavailable (503) when a shared replay cache cannot answer.
 *
 * @param tokenEndpoint the token endpoint's URL as the metadata names it (the issuer's origin): the `htu`
 */
export async function checkTokenRequestProof(ctx: AuthServerContext, request: FastifyRequest, client: RegisteredClient,
  tokenEndpoint: string): Promise<VerifiedProof | undefined> {
  let proof: string | undefined
  try {
    proof = proofHeader(request.raw)
  } catch (error) {
    throw error instanceof DpopProofError ? new InvalidDpopProof(error.reason, error.description) : error
  }
  if (proof === undefined) {
    // RFC 9449 §5.2: such a client's tokens are always bound; a request without a proof is malformed.
    if (client.dpopBoundAccessTokens) throw new InvalidRequest('a DPoP proof is required: the client is registered with dpop_bound_access_tokens')
    return undefined
  }
  const { dpop } = ctx.settings
  const nonces = dpop.nonces
  let verified: VerifiedProof
  try {
    verified = await verifyProof(proof, { method: 'POST', url: tokenEndpoint, nonceValid: nonces ? (nonce) => nonces.valid(nonce) : undefined },
      dpop, Math.floor(ctx.now() / 1000))
  } catch (error) {
    if (!(error instanceof DpopProofError)) throw error
    throw error.useNonce ? new UseDpopNonce() : new InvalidDpopProof(error.reason, error.description)
  }
  // §11.1: a proof is accepted once while it could be accepted at all: max_age, and the skew either side.
  const window = dpop.maxAgeSeconds + 2 * dpop.clockSkewSeconds
  if (!(await ctx.dpopReplay.firstUse(verified.jkt, verified.jti, verified.iat, window))) {
    throw new InvalidDpopProof('dpop_replay', 'the DPoP proof has been used before')
  }
  return verified
}
