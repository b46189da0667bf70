/** `dpop:` resolved once per load: what both the token endpoint and the gateway check proofs with. */
import type { DpopConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { createNonceIssuer, type NonceIssuer } from './nonce.js'
import { DEFAULT_DPOP_ALGORITHMS } from '../config/constants.js'
import { DPOP_ALGORITHMS, type ProofSettings } from './proof.js'

export interface DpopSettings extends ProofSettings {
  /** Server nonces (§8, §9); null when `dpop.nonce` is off. */
  readonly nonces: NonceIssuer | null
  readonly replayCacheSize: number
  /** Gateway: pass the `DPoP` header to the upstream. */
  readonly forwardProof: boolean
  /** `algs` of a `WWW-Authenticate: DPoP` challenge (§7.1). */
  readonly algs: string
}

/** Proofs older than this are refused by default: RFC 9449 §11.1 leaves it to the server; a proof is made per request. */
export const DEFAULT_MAX_AGE = '60s'
export const DEFAULT_CLOCK_SKEW = '5s'

/** What a proof may be signed with unless `dpop.algorithms` says otherwise. */
export { DEFAULT_DPOP_ALGORITHMS }

export function resolveDpop(config: DpopConfig | undefined, nowMs: () => number = Date.now): DpopSettings {
  const algorithms = config?.algorithms ?? DEFAULT_DPOP_ALGORITHMS
  return {
    algorithms,
    maxAgeSeconds: parseDuration(config?.max_age ?? DEFAULT_MAX_AGE) / 1000,
    clockSkewSeconds: parseDuration(config?.clock_skew ?? DEFAULT_CLOCK_SKEW) / 1000,
    nonces: config?.nonce ? createNonceIssuer(config.nonce_secret, parseDuration(config.nonce_lifetime ?? '5m'), nowMs) : null,
    replayCacheSize: config?.replay_cache_size ?? 100_000,
    forwardProof: config?.forward_proof ?? false,
    algs: algorithms.join(' '),
  }
}

export { DPOP_ALGORITHMS }
