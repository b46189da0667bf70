/** Resource owners from the YAML, for the password grant, the login page and the device page. */
import { createHash, timingSafeEqual } from 'node:crypto'
import type { UserConfig } from '../config/schema.js'
import { hashSecret, verifySecret } from '../crypto/secret-hash.js'

export interface User {
  readonly username: string
  readonly sub: string
  readonly claims: Readonly<Record<string, unknown>>
  /** The `identity_providers[].id` that vouched for a federated user; absent for a user of `users[]`. */
  readonly provider?: string
}

export class UserDirectory {
  private readonly users: ReadonlyMap<string, { user: User; config: UserConfig }>
  /** Verified against when the username is unknown, so both cases cost one scrypt (no user enumeration through timing). */
  private readonly decoy: Promise<string>

  constructor(configs: readonly UserConfig[]) {
    this.users = new Map(configs.map((config) => [config.username, {
      user: { username: config.username, sub: config.sub ?? config.username, claims: config.claims ?? {} },
      config,
    }]))
    this.decoy = hashSecret('portcullis-decoy-password')
  }

  /** How many users the YAML lists: the login page shows its form only when there is one. */
  get size(): number {
    return this.users.size
  }

  findBySub(sub: string): User | undefined {
    for (const { user } of this.users.values()) if (user.sub === sub) return user
    return undefined
  }

  /** The user when the password matches; undefined otherwise, in about the same time either way. */
  async verify(username: string, password: string): Promise<User | undefined> {
    const entry = this.users.get(username)
    if (!entry) {
      await verifySecret(password, await this.decoy)
      return undefined
    }
    const { config, user } = entry
    let ok: boolean
    if (config.password_hash !== undefined) ok = await verifySecret(password, config.password_hash)
    else {
      await verifySecret(password, await this.decoy)  // same cost as a hash check
      const digest = (value: string) => createHash('sha256').update(value).digest()
      ok = timingSafeEqual(digest(password), digest(config.password ?? ''))
    }
    return ok ? user : undefined
  }
}
