/** Registered clients, from the YAML: looked up by client_id, secrets only ever compared in constant time. */
import { createHash, timingSafeEqual } from 'node:crypto'
import type { ClientConfig, GrantType } from '../config/schema.js'
import { verifySecret } from '../crypto/secret-hash.js'

export type ClientAuthMethod = 'client_secret_basic' | 'client_secret_post' | 'none'

export interface RegisteredClient {
  readonly clientId: string
  readonly name: string
  readonly authMethod: ClientAuthMethod
  readonly confidential: boolean
  readonly grantTypes: ReadonlySet<GrantType>
  readonly scopes: ReadonlySet<string>
  readonly redirectUris: readonly string[]
  readonly requireState: boolean
  readonly requirePkce: boolean
  readonly firstParty: boolean
  /** Compares a presented secret with the registered one (plain from ${ENV}, or an scrypt hash). */
  verifySecret(secret: string): Promise<boolean>
}

/** G-10: equal-length digests so neither content nor length leaks through timing. */
function constantTimeEqual(a: string, b: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest()
  return timingSafeEqual(digest(a), digest(b))
}

function register(config: ClientConfig): RegisteredClient {
  const hasSecret = config.client_secret !== undefined || config.client_secret_hash !== undefined
  const authMethod = config.token_endpoint_auth_method ?? (hasSecret ? 'client_secret_basic' : 'none')
  return {
    clientId: config.client_id,
    name: config.name ?? config.client_id,
    authMethod,
    confidential: authMethod !== 'none',
    grantTypes: new Set(config.grant_types),
    scopes: new Set(config.scopes),
    redirectUris: config.redirect_uris ?? [],
    requireState: config.require_state ?? true,
    requirePkce: authMethod === 'none' ? true : config.require_pkce ?? true,
    firstParty: config.first_party ?? false,
    verifySecret: async (secret) => {
      if (config.client_secret_hash !== undefined) return verifySecret(secret, config.client_secret_hash)
      if (config.client_secret !== undefined) return constantTimeEqual(secret, config.client_secret)
      return false
    },
  }
}

export class ClientRegistry {
  private readonly clients: ReadonlyMap<string, RegisteredClient>
  constructor(configs: readonly ClientConfig[]) {
    this.clients = new Map(configs.map((config) => [config.client_id, register(config)]))
  }
  find(clientId: string): RegisteredClient | undefined {
    return this.clients.get(clientId)
  }
  all(): RegisteredClient[] {
    return [...this.clients.values()]
  }
}
