/** Everything an endpoint or grant of the embedded server needs, built once by createAuthServer. */
import type { FastifyBaseLogger } from 'fastify'
import type { AuditLog } from '../audit/audit.js'
import type { ReplayCache } from '../dpop/replay.js'
import type { Metrics } from '../metrics/metrics.js'
import type { ClientRegistry } from './clients.js'
import type { AuthServerSettings } from './settings.js'
import type { StorageAdapter } from './storage/adapter.js'
import type { UserDirectory } from './users.js'
import type { AccountDirectory } from './federation/accounts.js'
import type { IdentityProviders } from './federation/providers.js'
import type { TokenService } from './tokens.js'
import type { RevocationList } from './revocations.js'
import type { SigningKeys } from './keys/signing-keys.js'

/** Re-exported for the test suites that import it from here; the type lives in common/token-formats.ts. */
export type { SigningAlgorithm } from '../common/token-formats.js'

/**
 * Brute-force protection (RFC 6749 §2.3.1, §4.3.2; RFC 8628 §5.1): failures counted per key in a window. Keys look
 * like `client:<id>`, `ip:<address>`, `user:<name>`, `session:<id>`.
 */
export interface Throttle {
  /**
   * Counts one attempt on every key, atomically, before the attempt is evaluated (so parallel
   * guesses see each other). Throws TooManyAttempts (429 + Retry-After), counting nothing, when a key has
   * no attempt left in its window: failures so far plus attempts in flight.
   */
  reserve(keys: readonly string[]): Promise<Attempt>
}

/** One counted attempt: once its outcome is known, exactly one of these (a second call does nothing). */
export interface Attempt {
  /** It failed (or threw): it stays counted until its window ends. */
  keep(): void
  /** It succeeded: its point is given back on every key it took one from, and on no other. Never throws. */
  release(): Promise<void>
}

export interface AuthServerContext {
  readonly settings: AuthServerSettings
  readonly store: StorageAdapter
  readonly keys: SigningKeys
  readonly clients: ClientRegistry
  /** `users[]`: the password grant and the login form. */
  readonly users: UserDirectory
  /** Every user: `users[]` and those an identity provider vouched for (what a grant, a session or /userinfo finds by sub). */
  readonly accounts: AccountDirectory
  /** `identity_providers[]`: empty when none is configured. */
  readonly identityProviders: IdentityProviders
  readonly tokens: TokenService
  readonly revocations: RevocationList
  readonly throttle: Throttle
  /** RFC 8628 §5.1: wrong user codes on the /device page, per browser session and per address. */
  readonly userCodeThrottle: Throttle
  /** Interactions started per address (INTERACTION_LIMITS): keeps anonymous requests from filling the store. */
  readonly interactionThrottle: Throttle
  readonly now: () => number
  readonly log: FastifyBaseLogger
  readonly metrics: Metrics
  /** Security events (docs/audit.md): issued and revoked tokens, failed authentications, replays, lockouts. */
  readonly audit: AuditLog
  /**
   * RFC 9449 §11.1: the jtis of the DPoP proofs /token accepted, each single use inside its window. In the
   * process with a memory or SQLite store; in the store itself with Redis, so every instance sees them.
   */
  readonly dpopReplay: ReplayCache
}
