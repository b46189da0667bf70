/**
 * Revoked JWT access tokens (checklist RV-07): their jti is deny-listed until the token's exp, in the
 * store (so a restart keeps it) and in memory (so the gateway checks it synchronously on every request,
 * cache hits included). Every revocation is also pushed to the gateway's caches through `onRevoke`.
 */
import type { InvalidationSelector } from '../authn/authenticator.js'
import type { StorageAdapter } from './storage/adapter.js'

export class RevocationList {
  private readonly revoked = new Map<string, number>()
  /** Set by the gateway: evicts the revoked tokens from its caches. */
  onRevoke: (selector: InvalidationSelector) => void = () => {}

  constructor(private readonly store: StorageAdapter, private readonly now: () => number) {}

  /** Loads the deny-list kept by earlier runs. */
  async load(): Promise<void> {
    for (const { id, expiresAt } of await this.store.list('revoked_jti')) this.revoked.set(id, expiresAt)
  }

  isRevoked(jti: unknown): boolean {
    if (typeof jti !== 'string') return false
    const until = this.revoked.get(jti)
    if (until === undefined) return false
    if (until > this.now()) return true
    this.revoked.delete(jti)
    return false
  }

  /** Deny-lists a JWT access token until `exp` (seconds since the epoch). */
  async revokeJti(jti: string, exp: number): Promise<void> {
    const ttl = exp - Math.floor(this.now() / 1000)
    if (ttl <= 0) return
    this.revoked.set(jti, exp * 1000)
    await this.store.upsert('revoked_jti', jti, { exp }, ttl)
    this.onRevoke({ jti })
  }
}
