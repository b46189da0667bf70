/** The configured identity providers, each with the connector of its kind. */
import type { IdentityProviderConfig } from '../../config/schema.js'
import type { Connector } from './connector.js'
import { GitHubConnector } from './github.js'
import { OidcConnector } from './oidc.js'
import { resolveIdentityProvider, type IdentityProviderSettings } from './settings.js'

export interface FederatedProvider {
  readonly settings: IdentityProviderSettings
  readonly connector: Connector
}

export class IdentityProviders {
  private constructor(private readonly byId: ReadonlyMap<string, FederatedProvider>) {}

  static async open(configs: readonly IdentityProviderConfig[], allowInsecureHttp: boolean, now: () => number): Promise<IdentityProviders> {
    const providers = await Promise.all(configs.map(async (config) => {
      const settings = await resolveIdentityProvider(config, allowInsecureHttp)
      const connector: Connector = settings.kind === 'github' ? new GitHubConnector(settings) : new OidcConnector(settings, now)
      return [settings.id, { settings, connector }] as const
    }))
    return new IdentityProviders(new Map(providers))
  }

  get(id: string | undefined): FederatedProvider | undefined {
    return id === undefined ? undefined : this.byId.get(id)
  }

  list(): FederatedProvider[] {
    return [...this.byId.values()]
  }

  get size(): number {
    return this.byId.size
  }
}
