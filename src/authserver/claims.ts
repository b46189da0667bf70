/**
 * The OpenID Connect claims the embedded server hands out: the ID token's own (id-token.ts) and the
 * standard claims each scope releases at /userinfo (OIDC Core §5.4). Metadata lists both as claims_supported.
 */

/** OIDC Core §5.4: the standard claims each scope asks for. */
export const SCOPE_CLAIMS: Readonly<Record<string, readonly string[]>> = {
  profile: ['name', 'family_name', 'given_name', 'middle_name', 'nickname', 'preferred_username', 'profile', 'picture',
    'website', 'gender', 'birthdate', 'zoneinfo', 'locale', 'updated_at'],
  email: ['email', 'email_verified'],
  address: ['address'],
  phone: ['phone_number', 'phone_number_verified'],
}

/** What an ID token may carry (OIDC Core §2, §3.1.3.6); `auth_time` and `nonce` only when known or sent. */
export const ID_TOKEN_CLAIMS = ['sub', 'iss', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'azp', 'at_hash'] as const

/** OIDC Discovery §3 `claims_supported`: the ID token's claims, then every standard claim of SCOPE_CLAIMS, each once. */
export function claimsSupported(): string[] {
  return [...new Set([...ID_TOKEN_CLAIMS, ...Object.values(SCOPE_CLAIMS).flat()])]
}
