/**
 * Every user the embedded server knows: those of `users[]`, and those an identity provider vouched for, kept in
 * the store under our sub as of their last sign-in (so a refresh, /userinfo or a code redeemed later finds
 * them, and their groups are those of that sign-in). A federated account is kept as long as a grant of the
 * sign-in can live (the refresh-token TTL), renewed at each sign-in. Its upstream credential, kept only for
 * `refresh_check`, is sealed with `signing.key_encryption_key`.
 */
import type { StorageAdapter } from '../storage/adapter.js'
import type { KeyEncryptionKey, SealedJwk } from '../key-encryption.js'
import type { User, UserDirectory } from '../users.js'

interface StoredAccount {
  readonly username: string
  readonly claims: Record<string, unknown>
  readonly provider: string
  /** The upstream refresh token (OIDC) or access token (GitHub), sealed when a key-encryption key is set. */
  readonly credential?: { readonly sealed: SealedJwk } | { readonly clear: string }
}

/** Label of the sealed credential's envelope: it opens for this account only. */
const CREDENTIAL_ALG = 'upstream-credential'

export class AccountDirectory {
  /**
   * @param providers the configured `identity_providers[].id`s: an account of a provider taken out of the YAML is
   *   found no more (its sessions end, its grants stop refreshing), as a user taken out of `users[]`
   * @param ttlSeconds how long an account outlives its last sign-in: the refresh-token TTL
   */
  constructor(private readonly users: UserDirectory, private readonly store: StorageAdapter,
    private readonly options: { providers: ReadonlySet<string>; ttlSeconds: number; kek: KeyEncryptionKey | undefined }) {}

  /** The user with this sub: a configured one first, else a federated account; undefined when neither. */
  async find(sub: string): Promise<User | undefined> {
    const local = this.users.findBySub(sub)
    if (local) return local
    if (this.options.providers.size === 0) return undefined
    const stored = await this.store.find('account', sub) as StoredAccount | undefined
    if (!stored || !this.options.providers.has(stored.provider)) return undefined
    return { username: stored.username, sub, claims: stored.claims, provider: stored.provider }
  }

  /** Records (or renews) a federated user at sign-in, with the upstream credential `refresh_check` needs. */
  async save(user: User & { provider: string }, credential?: string): Promise<void> {
    const { kek, ttlSeconds } = this.options
    const sealed = credential === undefined ? undefined
      : kek ? { sealed: kek.seal(`account:${user.sub}`, CREDENTIAL_ALG, { k: credential }) } : { clear: credential }
    const value: StoredAccount = { username: user.username, claims: { ...user.claims }, provider: user.provider, ...(sealed && { credential: sealed }) }
    await this.store.upsert('account', user.sub, { ...value }, ttlSeconds)
  }

  /** The upstream credential kept for `refresh_check`, or undefined (none kept, or it does not open). */
  async credential(sub: string): Promise<string | undefined> {
    const stored = await this.store.find('account', sub) as StoredAccount | undefined
    const kept = stored?.credential
    if (!kept) return undefined
    if ('clear' in kept) return kept.clear
    if (!this.options.kek) return undefined
    const opened = this.options.kek.open(`account:${sub}`, CREDENTIAL_ALG, kept.sealed)
    return typeof opened.k === 'string' ? opened.k : undefined
  }

  /** Forgets a federated account (its upstream said it is gone). */
  async forget(sub: string): Promise<void> {
    await this.store.destroy('account', sub)
  }
}
