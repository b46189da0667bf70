/**
 * `authorization_server`: the embedded authorization server — its store, signing keys, token lifetimes,
 * clients and users, throttling, dynamic client registration and client metadata documents.
 */
import { Type, type Static } from '@sinclair/typebox'
import { GRANT_TYPES, KEK_FORMAT, KEK_PATTERN } from '../constants.js'
import { IdentityProviders } from './identity-providers.js'
import { Duration, NonEmpty, ScopeTokenPattern, Size, Strict, StringEnum } from './shared.js'

export { GRANT_TYPES }
export const CLIENT_AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'none', 'tls_client_auth', 'self_signed_tls_client_auth'] as const
const ScopeToken = ScopeTokenPattern()

const Client = Strict({
  // Copied into identity headers: no `,` or `"` (docs/configuration.md, identity header values).
  client_id: Type.String({ pattern: '^[\\x21\\x23-\\x2b\\x2d-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters other than , and "' }),
  client_secret: Type.Optional(Type.String({ minLength: 16, 'x-message': 'must be at least 16 characters' })),
  client_secret_hash: Type.Optional(Type.String({ pattern: '^scrypt\\$', 'x-message': 'must be the output of `portcullis hash-secret`' })),
  token_endpoint_auth_method: Type.Optional(StringEnum(CLIENT_AUTH_METHODS)),
  // RFC 8705 §2.1.2: what a tls_client_auth client's certificate must say (one of the two).
  tls_client_auth_subject_dn: Type.Optional(NonEmpty),
  tls_client_auth_san_dns: Type.Optional(NonEmpty),
  // RFC 8705 §2.2: the PEM certificate a self_signed_tls_client_auth client presents (relative to the config file).
  self_signed_certificate_file: Type.Optional(NonEmpty),
  grant_types: Type.Array(StringEnum(GRANT_TYPES), { minItems: 1 }),
  redirect_uris: Type.Optional(Type.Array(NonEmpty)),
  require_state: Type.Optional(Type.Boolean()),
  require_pkce: Type.Optional(Type.Boolean()),
  first_party: Type.Optional(Type.Boolean()),
  refresh_token_reuse_grace: Type.Optional(Duration),
  scopes: Type.Array(ScopeToken),
  audience: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
  name: Type.Optional(NonEmpty),
  id_token_signed_response_alg: Type.Optional(StringEnum(['RS256', 'ES256', 'EdDSA'] as const)),
  // The client must send a DPoP proof to /token (RFC 9449 §5.2, the client metadata of that name).
  dpop_bound_access_tokens: Type.Optional(Type.Boolean()),
  // OpenID Connect RP-Initiated Logout 1.0 §3.1: where the logout endpoint may send the browser afterwards.
  post_logout_redirect_uris: Type.Optional(Type.Array(NonEmpty)),
})

const User = Strict({
  // Copied into identity headers: no `,` or `"` (docs/configuration.md, identity header values).
  username: Type.String({ pattern: '^[\\x21\\x23-\\x2b\\x2d-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters other than , and "' }),
  sub: Type.Optional(Type.String({ pattern: '^[\\x21-\\x7e]{1,255}$', 'x-message': 'must be 1-255 printable ASCII characters' })),
  password: Type.Optional(NonEmpty),
  password_hash: Type.Optional(Type.String({ pattern: '^scrypt\\$', 'x-message': 'must be the output of `portcullis hash-secret`' })),
  claims: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
})

// The redirect URI forms a registration or a metadata document may use (authserver/registration/redirect-uris.ts).
const RedirectUriForms = Type.Array(StringEnum(['loopback', 'localhost', 'https', 'private_use'] as const), { minItems: 1 })

export const AuthorizationServer = Strict({
  enabled: Type.Boolean(),
  issuer: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+(/[^?#]*)?$', 'x-message': 'must be an http(s) URL without query or fragment' })),
  store: Type.Optional(Strict({
    type: StringEnum(['sqlite', 'memory', 'redis'] as const),
    path: Type.Optional(NonEmpty),
    // redis only (lint-authserver.ts): redis:// or rediss://, and the key prefix with its {hash tag}.
    url: Type.Optional(NonEmpty),
    prefix: Type.Optional(NonEmpty),
  })),
  signing: Type.Optional(Strict({
    algorithm: Type.Optional(StringEnum(['ES256', 'RS256', 'EdDSA'] as const)),
    rotation_publish_delay: Type.Optional(Duration),
    // Seals the private signing keys in the store (authserver/key-encryption.ts); from ${ENV}.
    key_encryption_key: Type.Optional(Type.String({ pattern: KEK_PATTERN, 'x-message': KEK_FORMAT })),
  })),
  access_token: Type.Optional(Strict({
    format: Type.Optional(StringEnum(['jwt', 'opaque'] as const)),
    ttl: Type.Optional(Duration),
    audience: Type.Optional(Type.Array(NonEmpty, { minItems: 1 })),
    // The user's claims copied into every access token of the user's grants (JWT claims; the opaque token's record).
    claims: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$', 'x-message': 'must be a claim name' }))),
  })),
  // reuse_grace: at most 10s (lint-authserver.ts).
  refresh_token: Type.Optional(Strict({ ttl: Type.Optional(Duration), reuse_grace: Type.Optional(Duration) })),
  authorization_code: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  session: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  consent: Type.Optional(Strict({ ttl: Type.Optional(Duration) })),
  clients: Type.Optional(Type.Array(Client)),
  users: Type.Optional(Type.Array(User)),
  identity_providers: Type.Optional(IdentityProviders),
  throttling: Type.Optional(Strict({
    failures_per_client: Type.Optional(Type.Integer({ minimum: 1 })),
    failures_per_ip: Type.Optional(Type.Integer({ minimum: 1 })),
    window: Type.Optional(Duration),
  })),
  // RFC 7591 dynamic client registration and RFC 7592 management (authserver/registration/); lint-authserver.ts.
  registration: Type.Optional(Strict({
    enabled: Type.Boolean(),
    // Normally ${ENV}: required as a Bearer token on /register when set; without it registration is open.
    initial_access_token: Type.Optional(Type.String({ minLength: 16 })),
    policy: Type.Optional(Strict({
      client_types: Type.Optional(Type.Array(StringEnum(['public', 'confidential'] as const), { minItems: 1 })),
      redirect_uris: Type.Optional(RedirectUriForms),
      grant_types: Type.Optional(Type.Array(StringEnum(['authorization_code', 'refresh_token', 'client_credentials',
        'urn:ietf:params:oauth:grant-type:device_code'] as const, 'must be authorization_code, refresh_token, client_credentials or urn:ietf:params:oauth:grant-type:device_code'),
      { minItems: 1 })),
      scopes: Type.Optional(Type.Array(ScopeToken)),
      max_redirect_uris: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
      max_name_length: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    })),
    unused_expiry: Type.Optional(Duration),
    rate: Type.Optional(Strict({ registrations: Type.Optional(Type.Integer({ minimum: 1 })), window: Type.Optional(Duration) })),
  })),
  // OAuth Client ID Metadata Documents (authserver/client-metadata/); lint-authserver.ts bounds the sizes and times.
  client_metadata_documents: Type.Optional(Strict({
    enabled: Type.Optional(Type.Boolean()),
    // Exact host names, or `*.example.com` (one label in place of the `*`); empty: any public host.
    allowed_hosts: Type.Optional(Type.Array(NonEmpty)),
    scopes: Type.Optional(Type.Array(ScopeToken)),
    max_size: Type.Optional(Size),
    timeout: Type.Optional(Duration),
    cache_ttl: Type.Optional(Strict({ min: Type.Optional(Duration), max: Type.Optional(Duration) })),
    allow_private_addresses: Type.Optional(Type.Boolean()),
    redirect_uris: Type.Optional(RedirectUriForms),
    // PEM CAs trusted for document hosts instead of the system's (a private CA); relative to the config file.
    ca_file: Type.Optional(NonEmpty),
    // Fetches started per client address (failures included) and in flight at once (client-metadata/fetch-bounds.ts).
    rate: Type.Optional(Strict({
      fetches: Type.Optional(Type.Integer({ minimum: 1 })),
      window: Type.Optional(Duration),
      concurrent: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
    })),
  })),
})

export type AuthorizationServerConfig = Static<typeof AuthorizationServer>
export type ClientConfig = Static<typeof Client>
export type UserConfig = Static<typeof User>
export type GrantType = (typeof GRANT_TYPES)[number]
