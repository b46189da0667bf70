/**
 * Revoked JWT access tokens (RFC 7009 §2.1: revocation takes effect at once): their jti is deny-listed
 * until the token's exp, in the store (so a restart keeps it) and in memory (so the gateway checks it synchronously on every request,
 * cache hits included). Every revocation is also pushed to the gateway's caches through `onRevoke`.
 */
import type { InvalidationSelector } from '../authn/authenticator.js'
import type { Broadcast, RevocationMessage } from './broadcast.js'
import type { StorageAdapter } from './storage/adapter.js'

export class RevocationList {
  private readonly revoked = new Map<string, number>()
  private broadcast: Broadcast | undefined
  /** Set by the gateway: evicts the revoked tokens from its caches. */
  onRevoke: (selector: InvalidationSelector) => void = () => {}
  /** Set by the gateway: drops every cached token of the embedded issuer (revocations may have been missed). */
  onResync: () => void = () => {}
  /** Set by the server: re-reads the signing keys (`portcullis keys rotate` ran, or messages were missed). */
  onKeysChanged: () => void = () => {}

  constructor(private readonly store: StorageAdapter, private readonly now: () => number,
    private readonly log?: { warn(fields: object, message: string): void }) {}

  /**
   * Several instances (one Redis store): this list publishes its revocations and applies the others' as they
   * arrive; after a lost subscription it reloads from the store and has the gateway drop its cached
   * embedded tokens, which may include one revoked meanwhile.
   */
  attach(broadcast: Broadcast): void {
    this.broadcast = broadcast
    broadcast.subscribe((message) => this.apply(message), () => {
      this.onKeysChanged()
      this.load().then(() => this.onResync(), (error: unknown) => {
        this.log?.warn({ err: error }, 'revocations: reload after reconnect failed; dropping cached embedded tokens anyway')
        this.onResync()
      })
    })
  }

  private apply(message: RevocationMessage): void {
    if (message.jti !== undefined && typeof message.jti.jti === 'string' && typeof message.jti.exp === 'number') {
      this.revoked.set(message.jti.jti, message.jti.exp * 1000)
      this.onRevoke({ jti: message.jti.jti })
    }
    if (typeof message.tokenHash === 'string') this.onRevoke({ tokenHash: message.tokenHash })
    if (message.keys === true) this.onKeysChanged()
  }

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
    void this.broadcast?.publish({ jti: { jti, exp } })
  }

  /** An opaque access token left the store: evict it from the caches here and on every other instance. */
  revokeHash(tokenHash: string): void {
    this.onRevoke({ tokenHash })
    void this.broadcast?.publish({ tokenHash })
  }
}
