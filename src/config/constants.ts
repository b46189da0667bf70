/**
 * Values the configuration's schema names, kept beside it so the schema imports nothing above the ground
 * floor; the features that implement them import them from here.
 */

/** `issuers[].preset`: identity providers whose token conventions Portcullis knows. */
export const PRESETS = ['entra', 'keycloak', 'auth0', 'okta', 'cognito'] as const
export type Preset = (typeof PRESETS)[number]

/** `authorization_server.identity_providers[].preset`: upstream identity providers with known conventions (authserver/federation/presets.ts). */
export const IDENTITY_PROVIDER_PRESETS = ['entra', 'google', 'okta', 'keycloak', 'auth0', 'github'] as const
export type IdentityProviderPreset = (typeof IDENTITY_PROVIDER_PRESETS)[number]

/** `dpop.algorithms`: the JWS algorithms a DPoP proof may use (RFC 9449 §5, asymmetric only). */
export const DPOP_ALGORITHMS = ['ES256', 'ES384', 'ES512', 'PS256', 'PS384', 'PS512', 'RS256', 'RS384', 'RS512', 'EdDSA', 'Ed25519'] as const
export type DpopAlgorithm = typeof DPOP_ALGORITHMS[number]
/** `dpop.algorithms` when not set. */
export const DEFAULT_DPOP_ALGORITHMS: readonly string[] = ['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519']

/** `authorization_server.signing.key_encryption_key`: 32 bytes in base64 (`openssl rand -base64 32`) or base64url, padded or not. */
export const KEK_PATTERN = '^([A-Za-z0-9+/]{43}|[A-Za-z0-9_-]{43})=?$'
export const KEK_FORMAT = 'must be 32 random bytes in base64 or base64url, such as the output of openssl rand -base64 32'

/** `routes[].methods`, `cors.allowed_methods`: the methods a route can name. */
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

/** Grant types the embedded server implements (the device URN and authorization_code arrive with the browser flows). */
export const GRANT_TYPES = [
  'authorization_code', 'client_credentials', 'refresh_token', 'password', 'urn:ietf:params:oauth:grant-type:device_code',
] as const
