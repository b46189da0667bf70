/** A client as every endpoint and grant sees it, wherever it was registered (the YAML, RFC 7591, a metadata document). */
import type { GrantType } from '../config/schema.js'
import type { SigningAlgorithm } from '../common/token-formats.js'
import type { PeerCertificate } from '../common/client-certificate.js'

/** RFC 8705 §2: the methods where the client's TLS certificate is its credential. */
export const CERTIFICATE_AUTH_METHODS = ['tls_client_auth', 'self_signed_tls_client_auth'] as const

export type ClientAuthMethod = 'client_secret_basic' | 'client_secret_post' | 'none' | typeof CERTIFICATE_AUTH_METHODS[number]

export interface RegisteredClient {
  readonly clientId: string
  readonly name: string
  readonly authMethod: ClientAuthMethod
  readonly confidential: boolean
  readonly grantTypes: ReadonlySet<GrantType>
  /** What the client is granted when a request names no scope, and the most it gets without a user (client_credentials). */
  readonly scopes: ReadonlySet<string>
  /**
   * What a user may grant it at /authorize and /device, where the consent page names each scope; absent: `scopes`.
   * A client that registered itself (RFC 7591): the registration policy's scopes. Its registered `scope` is what it
   * uses (RFC 7591 §2) and the default, not a ceiling: an MCP client steps up by asking again for the scopes a 403
   * named (MCP authorization, scope challenge), and the user decides.
   */
  readonly consentScopes?: ReadonlySet<string>
  readonly redirectUris: readonly string[]
  /** `post_logout_redirect_uris` (OpenID Connect RP-Initiated Logout 1.0 §3.1): YAML clients only. */
  readonly postLogoutRedirectUris?: readonly string[]
  readonly requireState: boolean
  readonly requirePkce: boolean
  readonly firstParty: boolean
  /** `refresh_token_reuse_grace` in ms: this client's own reuse grace, over the server's (settings.ts). */
  readonly refreshReuseGraceMs?: number
  /** `id_token_signed_response_alg`: RS256 when omitted (OIDC Registration §2), as strict clients assume. */
  readonly idTokenAlg: SigningAlgorithm
  /** `dpop_bound_access_tokens` (RFC 9449 §5.2): every token request must carry a DPoP proof. */
  readonly dpopBoundAccessTokens: boolean
  /** Compares a presented secret with the registered one (plain from ${ENV}, or an scrypt hash). */
  verifySecret(secret: string): Promise<boolean>
  /**
   * RFC 8705 §2: a client that authenticates with its TLS client certificate (`tls_client_auth`,
   * `self_signed_tls_client_auth`): whether the connection's certificate is its own.
   */
  readonly certificate?: { accepts(peer: PeerCertificate | undefined): boolean }
  /**
   * Set on the client of one token request that authenticated with its certificate: that certificate's
   * `x5t#S256`, which its access tokens are bound to (RFC 8705 §3).
   */
  readonly boundCertificate?: string
  /** Set for a client that registered itself (RFC 7591): its name is its own claim, never verified. */
  readonly dynamic?: {
    /** Records that the client was used (it then outlives `registration.unused_expiry`); once, then a no-op. */
    recordUse(): Promise<void>
  }
  /** Set for a client described by its Client ID Metadata Document: identified by the document's host, nothing more. */
  readonly metadataDocument?: { readonly host: string }
}

/** Where dynamically registered clients come from (registration/registrations.ts), and metadata documents (client-metadata/). */
export interface DynamicClientSource {
  /** @param from the client address that asks, where a fetch on its behalf is bounded (metadata documents) */
  client(clientId: string, from?: string): Promise<RegisteredClient | undefined>
}
