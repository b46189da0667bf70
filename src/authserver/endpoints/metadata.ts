/**
 * Authorization server metadata: RFC 8414 at `/.well-known/oauth-authorization-server` with
 * the issuer's path appended (the well-known segment is inserted, §3.1), and OpenID Connect Discovery at
 * `{issuer}/.well-known/openid-configuration` (appended, §4). Both documents are the same JSON, built once:
 * a client must find the same values whichever it reads (RFC 9068 §4).
 */
import type { FastifyInstance } from 'fastify'
import { GRANT_TYPES } from '../../config/constants.js'
import type { GrantType } from '../../config/schema.js'
import { claimsSupported } from '../claims.js'
import type { AuthServerContext } from '../context.js'
import { CERTIFICATE_AUTH_METHODS } from '../registered-client.js'
import { servePublicDocument } from './public-document.js'

/**
 * What the embedded server serves, so the metadata never advertises what is not there (RFC 8414 §2).
 * `/token`, `/revoke`, `/introspect` and `/jwks` are always mounted and always listed; the rest appear
 * only when their name is in the set:
 * - `authorization`: authorization_endpoint, response_types_supported, response_modes_supported,
 *   code_challenge_methods_supported and authorization_response_iss_parameter_supported (RFC 9207);
 * - `userinfo`: userinfo_endpoint;
 * - `device_authorization`: device_authorization_endpoint (RFC 8628);
 * - `id_token`: ID tokens are issued (OpenID Connect): id_token_signing_alg_values_supported, claims_supported;
 * - `grant:<grant_type>` (e.g. `grant:client_credentials`): that grant, in grant_types_supported; `password`
 *   is listed only if, besides, some client is registered for it (RFC 9700 §2.4: not to be used otherwise);
 * - `registration`: registration_endpoint (RFC 7591 §3; RFC 8414 §2), and the scopes clients may register
 *   for in scopes_supported;
 * - `client_metadata_documents`: client_id_metadata_document_supported (Client ID Metadata Documents), and those clients' scopes;
 * - `dpop`: dpop_signing_alg_values_supported (RFC 9449 §5.1), the algorithms `dpop.algorithms` accepts.
 */
export interface ImplementedEndpoints {
  readonly implemented: ReadonlySet<string>
  /**
   * The gateway's `resources[].resource` identifiers: RFC 9728 protected resources whose tokens this server
   * issues (clients name them as RFC 8707 `resource`), listed as `protected_resources` (RFC 9728 §4).
   */
  readonly protectedResources?: readonly string[]
}

const TOKEN_AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'none']

/** RFC 8414 §2: an empty array is left out rather than sent. */
const nonEmpty = (name: string, values: readonly unknown[]) => (values.length > 0 ? { [name]: values } : {})

function metadataDocument(ctx: AuthServerContext, { implemented, protectedResources = [] }: ImplementedEndpoints): Record<string, unknown> {
  const { settings } = ctx
  const has = (name: string) => implemented.has(name)
  // Every URL absolute, under the issuer's origin and path.
  const base = new URL(settings.issuer).origin + settings.prefix
  const grants = GRANT_TYPES.filter((grant: GrantType) =>
    has(`grant:${grant}`) && (grant !== 'password' || settings.grantTypes.has('password')))
  const scopes = [...new Set([...ctx.clients.all().flatMap((client) => [...client.scopes]),
    ...(has('registration') ? settings.registration?.scopes ?? [] : []),
    ...(has('client_metadata_documents') ? settings.clientMetadataDocuments?.scopes ?? [] : [])])]
  const authorization = has('authorization')
  // RFC 8705 §2.3, §3.3: where a client authenticates with its TLS certificate, its tokens are bound to it.
  const certificates = ctx.clients.all().some((client) => client.certificate !== undefined)
  const methods = certificates ? [...TOKEN_AUTH_METHODS, ...CERTIFICATE_AUTH_METHODS] : TOKEN_AUTH_METHODS
  return {
    // RFC 8414 §3.3: the configured string itself, byte for byte.
    issuer: settings.issuer,
    ...(authorization && { authorization_endpoint: `${base}/authorize` }),
    token_endpoint: `${base}/token`,
    jwks_uri: `${base}/jwks`,
    ...(has('userinfo') && { userinfo_endpoint: `${base}/userinfo` }),
    revocation_endpoint: `${base}/revoke`,
    introspection_endpoint: `${base}/introspect`,
    // OpenID Connect RP-Initiated Logout 1.0 §2.1: where a browser's session ends.
    ...(authorization && has('end_session') && { end_session_endpoint: `${base}/logout` }),
    ...(has('device_authorization') && { device_authorization_endpoint: `${base}/device_authorization` }),
    ...(has('registration') && { registration_endpoint: `${base}/register` }),
    // draft-ietf-oauth-client-id-metadata-document: a URL client_id names the client's own document.
    ...(has('client_metadata_documents') && { client_id_metadata_document_supported: true }),
    ...nonEmpty('scopes_supported', scopes),
    ...(authorization && { response_types_supported: ['code'], response_modes_supported: ['query'] }),
    // Explicit: RFC 8414 §2 reads an absent member as ["authorization_code", "implicit"].
    ...nonEmpty('grant_types_supported', grants),
    token_endpoint_auth_methods_supported: methods,
    revocation_endpoint_auth_methods_supported: methods,
    // RFC 7662 §2.1: introspection is for authenticated callers only.
    introspection_endpoint_auth_methods_supported: methods.filter((method) => method !== 'none'),
    ...(certificates && { tls_client_certificate_bound_access_tokens: true }),
    // RFC 9700 §2.1.1: how clients find out PKCE is supported.
    ...(authorization && { code_challenge_methods_supported: ['S256'] }),
    subject_types_supported: ['public'],
    // OIDC Discovery §3: RS256 MUST be listed; without this member oauth4webapi accepts RS256 ID tokens only. These
    // are exactly the algs keys.ts holds keys for, so every alg a client can be given (id-token.ts).
    ...(has('id_token') && { id_token_signing_alg_values_supported: [...new Set([settings.algorithm, 'RS256'])] }),
    // OIDC Discovery §3 (RECOMMENDED): the ID token's claims and the standard claims /userinfo releases.
    ...(has('id_token') && { claims_supported: claimsSupported() }),
    ...(authorization && { authorization_response_iss_parameter_supported: true }),
    // RFC 9449 §5.1: that /token takes DPoP proofs, and signed with which algorithms.
    ...(has('dpop') && { dpop_signing_alg_values_supported: [...settings.dpop.algorithms] }),
    // RFC 9728 §4 (OPTIONAL). RFC 8414 has no member for `access_token.audience`, and RFC 8707 defines none.
    ...nonEmpty('protected_resources', [...new Set(protectedResources)]),
  }
}

/** Registers both metadata documents; returns their paths. */
export function registerMetadata(app: FastifyInstance, ctx: AuthServerContext, endpoints: ImplementedEndpoints): string[] {
  const body = JSON.stringify(metadataDocument(ctx, endpoints))
  const paths = [
    `/.well-known/oauth-authorization-server${ctx.settings.prefix}`,
    `${ctx.settings.prefix}/.well-known/openid-configuration`,
  ]
  for (const path of paths) {
    // Five minutes; the document changes only with the configuration.
    servePublicDocument(app, path, { contentType: 'application/json', maxAgeSeconds: 300, body: () => body, issuer: ctx.settings.issuer })
  }
  return paths
}
