/**
 * What the embedded authorization server and the gateway both know of the embedded server's artifacts: the
 * prefixes of its opaque secrets (recognisable to secret scanners, and routed without a store lookup), the
 * names of its browser cookies (never forwarded upstream) and the algorithms it signs with. Neither side
 * imports the other for these.
 */

/** An opaque access token (`access_token.format: opaque`). */
export const OPAQUE_ACCESS_TOKEN_PREFIX = 'pat_'
/** A refresh token (RFC 6749 §1.5). */
export const REFRESH_TOKEN_PREFIX = 'prt_'
/** A device code (RFC 8628 §3.2). */
export const DEVICE_CODE_PREFIX = 'pdc_'

/** The embedded server's login session cookie. */
export const SESSION_COOKIE = 'portcullis_session'
/** The CSRF secret of the pages' forms (@fastify/csrf-protection's cookie). */
export const CSRF_COOKIE = 'portcullis_csrf'
/** Binds a sign-in at an identity provider to the browser that started it (authserver/federation/flow.ts). */
export const FEDERATION_COOKIE = 'portcullis_federation'
/** The gateway's own cookies: never forwarded to an upstream (a session cookie there is a login for whoever reads it). */
export const GATEWAY_COOKIES: ReadonlySet<string> = new Set([SESSION_COOKIE, CSRF_COOKIE, FEDERATION_COOKIE])

/** The JWS algorithms the embedded server signs with (`authorization_server.signing.algorithms`). */
export type SigningAlgorithm = 'ES256' | 'RS256' | 'EdDSA'
