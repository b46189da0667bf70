/**
 * Access-token payloads shaped as Entra ID, Keycloak, Auth0, Okta and Amazon Cognito issue them, for the
 * issuer presets. Each returns claims without iat/exp (the signer adds them). Values are realistic but made up.
 * All five sign with RS256 by default; the *_TYP constants are the JOSE header `typ` each sends
 * (`undefined`: no typ at all; signWith defaults typ to 'at+jwt', so pass `header: { typ: undefined }`).
 * Background and sources: /tmp/notes/providers.md.
 */
import { randomBytes, randomUUID } from 'node:crypto'
import type { JWTPayload } from 'jose'

export const PROVIDER_ALG = 'RS256'
/** https://learn.microsoft.com/en-us/entra/identity-platform/access-token-claims-reference ("always JWT") */
export const ENTRA_TYP = 'JWT'
/** Keycloak default; 'at+jwt' only with client attribute access.token.header.type.rfc9068=true (26.2+). */
export const KEYCLOAK_TYP = 'JWT'
export const KEYCLOAK_RFC9068_TYP = 'at+jwt'
/** Auth0 token profile (the default); APIs set to the RFC 9068 profile send 'at+jwt'. */
export const AUTH0_TYP = 'JWT'
export const AUTH0_RFC9068_TYP = 'at+jwt'
/** Okta custom authorization server: no typ (https://support.okta.com/help/s/article/the-typ-field-is-missing-from-the-access-token-header). */
export const OKTA_TYP = undefined
/** Okta org authorization server (issuer = bare org URL): tokens meant for Okta only, not for resource servers. */
export const OKTA_ORG_AS_TYP = 'application/okta-internal-at+jwt'
/** https://docs.aws.amazon.com/cognito/latest/developerguide/amazon-cognito-user-pools-using-the-access-token.html (kid + alg only) */
export const COGNITO_TYP = undefined

export const entraIssuerV2 = (tenantId: string) => `https://login.microsoftonline.com/${tenantId}/v2.0`
export const entraIssuerV1 = (tenantId: string) => `https://sts.windows.net/${tenantId}/`
export const keycloakIssuer = (origin: string, realm: string) => `${origin}/realms/${realm}`
export const auth0Issuer = (domain: string) => `https://${domain}/`
export const oktaIssuer = (domain: string, authServerId = 'default') => `https://${domain}/oauth2/${authServerId}`
export const cognitoIssuer = (region: string, poolId: string) => `https://cognito-idp.${region}.amazonaws.com/${poolId}`

const seconds = () => Math.floor(Date.now() / 1000)
const opaque = (bytes: number) => randomBytes(bytes).toString('base64url')

interface EntraOptions { issuer: string; audience: string; tenantId: string; clientId?: string }
const ENTRA_CLIENT = '8c1a4f3e-2b7d-4e91-a6c5-0f9d3b2e7a14'

/** v2.0 delegated token: scp is a space-separated string, roles only if app roles are assigned to the user.
 * https://learn.microsoft.com/en-us/entra/identity-platform/access-token-claims-reference */
export function entraUserToken(o: EntraOptions & { scp?: string; roles?: string[] }): JWTPayload {
  return {
    aud: o.audience, iss: o.issuer, aio: opaque(48), azp: o.clientId ?? ENTRA_CLIENT, azpacr: '0',
    name: 'Megan Bowen', oid: '4f6c2a1e-93b8-4d57-8e0a-b1c2d3e4f5a6', preferred_username: 'meganb@contoso.com',
    rh: opaque(24), ...(o.roles ? { roles: o.roles } : {}), scp: o.scp ?? 'Orders.Read Orders.Write',
    sub: 'AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ', tid: o.tenantId, uti: opaque(16), ver: '2.0',
  }
}

/** v2.0 app-only (client credentials): roles array, no scp. idtyp is an optional claim the API must configure.
 * https://learn.microsoft.com/en-us/entra/identity-platform/optional-claims-reference */
export function entraAppToken(o: EntraOptions & { roles?: string[]; idtyp?: boolean }): JWTPayload {
  const sp = '0b9e1f2a-7c3d-4e5f-8a6b-9c0d1e2f3a4b' // service principal object id: oid and sub alike
  return {
    aud: o.audience, iss: o.issuer, aio: opaque(48), azp: o.clientId ?? ENTRA_CLIENT, azpacr: '1',
    ...(o.idtyp === false ? {} : { idtyp: 'app' }), oid: sp, rh: opaque(24), roles: o.roles ?? ['Orders.Read.All'],
    sub: sp, tid: o.tenantId, uti: opaque(16), ver: '2.0',
  }
}

/** v1.0 delegated token (API manifest accessTokenAcceptedVersion null/1): appid, no azp; aud may be an App ID URI.
 * https://learn.microsoft.com/en-us/entra/identity-platform/access-tokens */
export function entraV1Token(o: EntraOptions & { scp?: string }): JWTPayload {
  return {
    aud: o.audience, iss: o.issuer, acr: '1', aio: opaque(48), amr: ['pwd', 'mfa'], appid: o.clientId ?? ENTRA_CLIENT,
    appidacr: '0', family_name: 'Bowen', given_name: 'Megan', idp: o.issuer, ipaddr: '203.0.113.24', name: 'Megan Bowen',
    oid: '4f6c2a1e-93b8-4d57-8e0a-b1c2d3e4f5a6', rh: opaque(24), scp: o.scp ?? 'user_impersonation',
    sub: 'l3_roISQU222bULS9yi2k0XpqpOiMz5H3ZACo1GeXA', tid: o.tenantId, unique_name: 'meganb@contoso.com',
    upn: 'meganb@contoso.com', uti: opaque(16), ver: '1.0',
  }
}

interface KeycloakOptions {
  issuer: string
  /** The client the token was issued to (azp). */
  clientId: string
  /** Omit for no aud at all. A stock realm gives 'account' (Audience Resolve); an API needs an audience mapper. */
  audience?: string | string[]
  realmRoles?: string[]
  /** resource_access entries besides the stock `account` client. */
  clientRoles?: Record<string, string[]>
  scope?: string
}
const realmOf = (issuer: string) => issuer.slice(issuer.lastIndexOf('/') + 1)
function keycloakBase(o: KeycloakOptions, scope: string): JWTPayload {
  const clients = { ...(o.clientRoles ?? { 'orders-api': ['orders-reader'] }), account: ['manage-account', 'manage-account-links', 'view-profile'] }
  return {
    jti: randomUUID(), iss: o.issuer, ...(o.audience === undefined ? {} : { aud: o.audience }), typ: 'Bearer', azp: o.clientId, acr: '1',
    realm_access: { roles: o.realmRoles ?? [`default-roles-${realmOf(o.issuer)}`, 'offline_access', 'uma_authorization', 'orders-reader'] },
    resource_access: Object.fromEntries(Object.entries(clients).map(([client, roles]) => [client, { roles }])),
    scope: o.scope ?? scope,
  }
}

/** User token (Keycloak 25+: no session_state, sid only). Payload typ is 'Bearer'; ID tokens carry typ 'ID'.
 * https://www.keycloak.org/docs/latest/server_admin/#audience-support, https://www.keycloak.org/docs/latest/upgrading/ */
export function keycloakUserToken(o: KeycloakOptions): JWTPayload {
  return {
    ...keycloakBase(o, 'openid profile email'), sub: 'f3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d', auth_time: seconds() - 30,
    sid: randomUUID(), 'allowed-origins': ['https://app.example.com'], email_verified: true, name: 'Alice Liddell',
    preferred_username: 'alice', given_name: 'Alice', family_name: 'Liddell', email: 'alice@example.com',
  }
}

/** Service-account (client_credentials) token: client_id/clientHost/clientAddress from the `service_account` scope
 * (26.1+; older realms put the same mappers on the client). No sid. https://github.com/keycloak/keycloak/pull/35860 */
export function keycloakServiceAccountToken(o: KeycloakOptions): JWTPayload {
  return {
    ...keycloakBase(o, 'profile email'), sub: '7a8b9c0d-1e2f-4a3b-9c4d-5e6f7a8b9c0d', 'allowed-origins': ['/*'],
    clientHost: '10.0.4.17', email_verified: false, preferred_username: `service-account-${o.clientId}`,
    clientAddress: '10.0.4.17', client_id: o.clientId,
  }
}

interface Auth0Options {
  issuer: string; audience: string; clientId: string; permissions?: string[]
  /** 'rfc9068' (RFC 9068 token profile): client_id and jti instead of azp. */
  profile?: 'auth0' | 'rfc9068'
}
const auth0Client = (o: Auth0Options) =>
  o.profile === 'rfc9068' ? { client_id: o.clientId, jti: opaque(16) } : { azp: o.clientId }

/** User token with RBAC + "Add Permissions in the Access Token"; with `openid` the aud is [API, /userinfo].
 * https://auth0.com/docs/secure/tokens/access-tokens/access-token-profiles */
export function auth0UserToken(o: Auth0Options & { userinfoAudience?: boolean; rolesClaim?: string }): JWTPayload {
  const permissions = o.permissions ?? ['read:orders', 'write:orders']
  return {
    iss: o.issuer, sub: 'auth0|64f1c2a9e3b7d5a1c9e2f4b6',
    aud: o.userinfoAudience === false ? o.audience : [o.audience, new URL('userinfo', o.issuer).href],
    ...auth0Client(o), scope: `openid profile email ${permissions.join(' ')}`, permissions,
    [o.rolesClaim ?? 'https://example.com/roles']: ['order-manager'],
  }
}

/** M2M (client credentials): sub `<client_id>@clients`, gty, aud a single string. Shape as observed in issued
 * tokens; the flow: https://auth0.com/docs/get-started/authentication-and-authorization-flow/client-credentials-flow */
export function auth0M2mToken(o: Auth0Options): JWTPayload {
  const permissions = o.permissions ?? ['read:orders']
  return {
    iss: o.issuer, sub: `${o.clientId}@clients`, aud: o.audience, ...auth0Client(o),
    scope: permissions.join(' '), gty: 'client-credentials', permissions,
  }
}

interface OktaOptions { issuer: string; audience: string; clientId: string; scopes?: string[] }

/** Custom authorization server user token: scp is an array, sub the login, uid the user id, cid the client.
 * https://developer.okta.com/docs/reference/api/oidc/#access-token */
export function oktaUserToken(o: OktaOptions & { groups?: string[] }): JWTPayload {
  return {
    ver: 1, jti: `AT.${opaque(32)}`, iss: o.issuer, aud: o.audience, cid: o.clientId, uid: '00u8f2kq1xYzAbCdE5d7',
    scp: o.scopes ?? ['openid', 'profile', 'orders:read'], auth_time: seconds() - 30, sub: 'alice@example.com',
    ...(o.groups ? { groups: o.groups } : {}),
  }
}

/** Client credentials: sub is the client id, no uid, custom scopes only. */
export function oktaClientToken(o: OktaOptions): JWTPayload {
  return { ver: 1, jti: `AT.${opaque(32)}`, iss: o.issuer, aud: o.audience, cid: o.clientId, scp: o.scopes ?? ['orders:read'], sub: o.clientId }
}

interface CognitoOptions { issuer: string; clientId: string }

/** User access token: no aud, client id in client_id, groups in cognito:groups, scope a string.
 * https://docs.aws.amazon.com/cognito/latest/developerguide/amazon-cognito-user-pools-using-the-access-token.html */
export function cognitoUserToken(o: CognitoOptions & { groups?: string[]; scope?: string }): JWTPayload {
  return {
    sub: '94e8f4a8-b0e1-70c4-2d3f-5a6b7c8d9e0f', 'cognito:groups': o.groups ?? ['order-readers'], iss: o.issuer, version: 2,
    client_id: o.clientId, origin_jti: randomUUID(), event_id: randomUUID(), token_use: 'access',
    scope: o.scope ?? 'openid email https://api.example.com/orders.read', auth_time: seconds() - 30, jti: randomUUID(),
    username: '94e8f4a8-b0e1-70c4-2d3f-5a6b7c8d9e0f',
  }
}

/** M2M (client credentials): sub is the client id; custom `<resource-server-id>/<scope>` scopes only.
 * https://docs.aws.amazon.com/cognito/latest/developerguide/cognito-user-pools-define-resource-servers.html */
export function cognitoClientToken(o: CognitoOptions & { scope?: string }): JWTPayload {
  return {
    sub: o.clientId, token_use: 'access', scope: o.scope ?? 'orders/read orders/write', auth_time: seconds(),
    iss: o.issuer, version: 2, jti: randomUUID(), client_id: o.clientId,
  }
}

/** ID token (negative case: must not pass as an access token): aud = client id, token_use 'id'.
 * https://docs.aws.amazon.com/cognito/latest/developerguide/amazon-cognito-user-pools-using-the-id-token.html */
export function cognitoIdToken(o: CognitoOptions & { groups?: string[] }): JWTPayload {
  return {
    at_hash: opaque(16), sub: '94e8f4a8-b0e1-70c4-2d3f-5a6b7c8d9e0f', 'cognito:groups': o.groups ?? ['order-readers'],
    email_verified: true, iss: o.issuer, 'cognito:username': '94e8f4a8-b0e1-70c4-2d3f-5a6b7c8d9e0f',
    origin_jti: randomUUID(), aud: o.clientId, event_id: randomUUID(), token_use: 'id', auth_time: seconds() - 30,
    jti: randomUUID(), email: 'alice@example.com',
  }
}
