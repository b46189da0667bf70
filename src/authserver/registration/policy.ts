/**
 * `authorization_server.registration` with its defaults, and what a registration request (RFC 7591 §2,
 * §3.1) may register under it. A request is refused whole (RFC 7591 §3.2.2: invalid_redirect_uri,
 * invalid_client_metadata) or registered as checked; the only values substituted are the defaults of
 * omitted fields and the scope, which is cut down to what the policy allows (§3.2.1: the response says
 * what was registered). Descriptions name the field and the rule, never a value the client sent.
 */
import type { AuthorizationServerConfig, GrantType } from '../../config/schema.js'
import { GRANT_TYPES } from '../../config/constants.js'
import { parseDuration } from '../../config/units.js'
import { InvalidClientMetadata, InvalidRedirectUri } from '../../errors/oauth-errors.js'
import type { SigningAlgorithm } from '../../common/token-formats.js'
import { DEVICE_CODE_GRANT_TYPE } from '../grant-types.js'
import { parseScope } from '../scope.js'
import { DEFAULT_REDIRECT_URI_FORMS, formNotAllowed, redirectUriForm, type RedirectUriForm } from './redirect-uris.js'

export type ClientType = 'public' | 'confidential'
export type RegistrableGrantType = Exclude<GrantType, 'password'>
export type RegisteredAuthMethod = 'none' | 'client_secret_basic' | 'client_secret_post'

export interface RegistrationSettings {
  /** Required as a Bearer token on /register when set (compared in constant time); absent: open registration. */
  readonly initialAccessToken?: string
  readonly clientTypes: ReadonlySet<ClientType>
  readonly redirectUriForms: ReadonlySet<RedirectUriForm>
  readonly grantTypes: ReadonlySet<RegistrableGrantType>
  /** The scopes a registered client may be given; a registration asking for others gets only these. */
  readonly scopes: readonly string[]
  readonly maxRedirectUris: number
  readonly maxNameLength: number
  /** A registration never used at /authorize or in a client authentication is deleted after this. */
  readonly unusedExpirySeconds: number
  /** Registrations per client address per window (429 + Retry-After beyond). */
  readonly registrationsPerWindow: number
  readonly windowSeconds: number
}

/** The metadata of a registered client, as registered and echoed (RFC 7591 §3.2.1, RFC 7592 §3). */
export interface ClientMetadata {
  readonly redirect_uris: readonly string[]
  readonly token_endpoint_auth_method: RegisteredAuthMethod
  readonly grant_types: readonly RegistrableGrantType[]
  readonly response_types: readonly 'code'[]
  /** Space-delimited (RFC 7591 §2); may be empty. */
  readonly scope: string
  readonly client_name?: string
  readonly software_id?: string
  readonly software_version?: string
  /** OpenID Connect Registration §2: RS256 or the access-token algorithm, the two the server has keys for. */
  readonly id_token_signed_response_alg?: SigningAlgorithm
  /** RFC 9449 §5.2: the client always sends DPoP proofs to /token; false when omitted. */
  readonly dpop_bound_access_tokens?: boolean
}

/** `registration:` with every default applied; undefined when registration is off. */
export function resolveRegistration(config: AuthorizationServerConfig['registration']): RegistrationSettings | undefined {
  if (!config?.enabled) return undefined
  const policy = config.policy ?? {}
  return {
    ...(config.initial_access_token !== undefined && { initialAccessToken: config.initial_access_token }),
    clientTypes: new Set(policy.client_types ?? ['public', 'confidential']),
    redirectUriForms: new Set(policy.redirect_uris ?? DEFAULT_REDIRECT_URI_FORMS),
    grantTypes: new Set(policy.grant_types ?? ['authorization_code', 'refresh_token']),
    scopes: [...new Set(policy.scopes ?? [])],
    maxRedirectUris: policy.max_redirect_uris ?? 5,
    maxNameLength: policy.max_name_length ?? 100,
    unusedExpirySeconds: Math.max(1, Math.floor(parseDuration(config.unused_expiry ?? '7d') / 1000)),
    registrationsPerWindow: config.rate?.registrations ?? 20,
    windowSeconds: Math.max(1, Math.ceil(parseDuration(config.rate?.window ?? '1h') / 1000)),
  }
}

const AUTH_METHODS: readonly RegisteredAuthMethod[] = ['none', 'client_secret_basic', 'client_secret_post']
/** Grants that hand out refresh tokens: `refresh_token` alone is of no use. */
const ISSUES_REFRESH: ReadonlySet<string> = new Set(['authorization_code', DEVICE_CODE_GRANT_TYPE])
const MAX_SOFTWARE_FIELD = 255
/** Control characters, and the bidirectional marks and overrides that make a name read as another. */
const UNPRINTABLE = /[\p{Cc}\u200e\u200f\u202a-\u202e\u2066-\u2069]/u

const metadataError = (description: string) => new InvalidClientMetadata(description)

/** The member, or undefined when it is absent or null (some clients send null for what they leave out). */
function member(body: Record<string, unknown>, name: string): unknown {
  return Object.hasOwn(body, name) && body[name] !== null ? body[name] : undefined
}

function stringArray(value: unknown, name: string, error: (description: string) => Error): string[] | undefined {
  if (value === undefined) return undefined
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) throw error(`${name} must be an array of strings`)
  return [...new Set(value as string[])]
}

function shortText(value: unknown, name: string, maxLength: number): string | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'string' || value.trim() === '') throw metadataError(`${name} must be a non-empty string`)
  if ([...value].length > maxLength) throw metadataError(`${name} must be at most ${maxLength} characters`)
  if (UNPRINTABLE.test(value)) throw metadataError(`${name} must not contain control or bidirectional formatting characters`)
  return value
}

function authMethodOf(value: unknown, settings: RegistrationSettings): RegisteredAuthMethod {
  // RFC 7591 §2 defaults to client_secret_basic; where only public clients may register, to none.
  if (value === undefined) return settings.clientTypes.has('confidential') ? 'client_secret_basic' : 'none'
  if (typeof value !== 'string' || !AUTH_METHODS.includes(value as RegisteredAuthMethod)) {
    throw metadataError('token_endpoint_auth_method must be none, client_secret_basic or client_secret_post')
  }
  const method = value as RegisteredAuthMethod
  const type: ClientType = method === 'none' ? 'public' : 'confidential'
  if (!settings.clientTypes.has(type)) throw metadataError(`${type} clients (token_endpoint_auth_method ${method}) may not register here`)
  return method
}

function grantTypesOf(value: unknown, method: RegisteredAuthMethod, settings: RegistrationSettings): RegistrableGrantType[] {
  // RFC 7591 §2: authorization_code when omitted.
  const grants = stringArray(value, 'grant_types', metadataError) ?? ['authorization_code']
  if (grants.length === 0) throw metadataError('grant_types must not be empty')
  grants.forEach((grant, index) => {
    if (!(GRANT_TYPES as readonly string[]).includes(grant)) throw metadataError(`grant_types[${index}] is not a grant type of this server`)
    if (!settings.grantTypes.has(grant as RegistrableGrantType)) throw metadataError(`grant_types: ${grant} may not be registered here`)
  })
  if (grants.includes('client_credentials') && method === 'none') {
    throw metadataError('client_credentials needs a confidential client (client_secret_basic or client_secret_post), RFC 6749 section 4.4')
  }
  if (grants.includes('refresh_token') && !grants.some((grant) => ISSUES_REFRESH.has(grant))) {
    throw metadataError('refresh_token needs a grant that issues refresh tokens (authorization_code or device_code)')
  }
  return grants as RegistrableGrantType[]
}

/** RFC 7591 §2.1: response_types and grant_types must agree; only `code` exists here. */
function responseTypesOf(value: unknown, grants: readonly RegistrableGrantType[]): 'code'[] {
  const code = grants.includes('authorization_code')
  const types = stringArray(value, 'response_types', metadataError) ?? (code ? ['code'] : [])
  if (types.some((type) => type !== 'code')) throw metadataError('response_types may only contain code')
  if (code !== types.includes('code')) throw metadataError('response_types code goes with the authorization_code grant, and only with it')
  return types as 'code'[]
}

function redirectUrisOf(value: unknown, grants: readonly RegistrableGrantType[], settings: RegistrationSettings): string[] {
  const uris = stringArray(value, 'redirect_uris', (description) => new InvalidRedirectUri(description)) ?? []
  if (!grants.includes('authorization_code')) {
    if (uris.length > 0) throw metadataError('redirect_uris are only used by the authorization_code grant')
    return []
  }
  // RFC 7591 §2: required for redirect-based flows.
  if (uris.length === 0) throw new InvalidRedirectUri('authorization_code needs at least one redirect URI')
  if (uris.length > settings.maxRedirectUris) throw new InvalidRedirectUri(`at most ${settings.maxRedirectUris} redirect URIs may be registered`)
  uris.forEach((uri, index) => {
    const checked = redirectUriForm(uri)
    if ('problem' in checked) throw new InvalidRedirectUri(`redirect_uris[${index}] ${checked.problem}`)
    if (!settings.redirectUriForms.has(checked.form)) throw new InvalidRedirectUri(`redirect_uris[${index}]: ${formNotAllowed(checked.form)}`)
  })
  return uris
}

/** Omitted: every allowed scope. Otherwise the requested ones that are allowed; none of them is a refusal. */
function scopeOf(value: unknown, settings: RegistrationSettings): string {
  if (value === undefined) return settings.scopes.join(' ')
  if (typeof value !== 'string') throw metadataError('scope must be a string of space-separated scope tokens')
  if (value === '') return ''
  let requested: string[]
  try {
    requested = parseScope(value)
  } catch {
    throw metadataError('scope must be space-separated scope tokens (RFC 6749 section 3.3)')
  }
  const allowed = new Set(settings.scopes)
  const granted = requested.filter((scope) => allowed.has(scope))
  if (granted.length === 0) throw metadataError('none of the requested scopes may be registered here')
  return granted.join(' ')
}

function idTokenAlgOf(value: unknown, algorithm: SigningAlgorithm): SigningAlgorithm | undefined {
  if (value === undefined) return undefined
  if (value !== 'RS256' && value !== algorithm) throw metadataError(`id_token_signed_response_alg must be RS256 or ${algorithm}`)
  return value as SigningAlgorithm
}

/**
 * The metadata to register for a request body (a parsed JSON value), or the RFC 7591 §3.2.2 error. Members
 * this server does not use (logo_uri, contacts, jwks, software_statement, a client_id or client_secret of the
 * client's choosing…) are ignored (§2: "MUST ignore") and not echoed.
 */
export function checkClientMetadata(body: unknown, settings: RegistrationSettings, algorithm: SigningAlgorithm): ClientMetadata {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw metadataError('the body must be a JSON object')
  const fields = body as Record<string, unknown>
  const method = authMethodOf(member(fields, 'token_endpoint_auth_method'), settings)
  const grants = grantTypesOf(member(fields, 'grant_types'), method, settings)
  const responseTypes = responseTypesOf(member(fields, 'response_types'), grants)
  const redirectUris = redirectUrisOf(member(fields, 'redirect_uris'), grants, settings)
  const scope = scopeOf(member(fields, 'scope'), settings)
  const name = shortText(member(fields, 'client_name'), 'client_name', settings.maxNameLength)
  const softwareId = shortText(member(fields, 'software_id'), 'software_id', MAX_SOFTWARE_FIELD)
  const softwareVersion = shortText(member(fields, 'software_version'), 'software_version', MAX_SOFTWARE_FIELD)
  const idTokenAlg = idTokenAlgOf(member(fields, 'id_token_signed_response_alg'), algorithm)
  const dpopBound = member(fields, 'dpop_bound_access_tokens')
  if (dpopBound !== undefined && typeof dpopBound !== 'boolean') throw metadataError('dpop_bound_access_tokens must be true or false')
  return {
    redirect_uris: redirectUris,
    token_endpoint_auth_method: method,
    grant_types: grants,
    response_types: responseTypes,
    scope,
    ...(name !== undefined && { client_name: name }),
    ...(softwareId !== undefined && { software_id: softwareId }),
    ...(softwareVersion !== undefined && { software_version: softwareVersion }),
    ...(idTokenAlg !== undefined && { id_token_signed_response_alg: idTokenAlg }),
    ...(dpopBound !== undefined && { dpop_bound_access_tokens: dpopBound }),
  }
}
