/**
 * Config-time checks of `authorization_server` (redirect URIs as RFC 6749 §3.1.2 and RFC 9700 §2.6 allow
 * them, user subjects no client_id can take (RFC 9068 §5), the password grant for first-party clients only,
 * and "a client with a grant it cannot use"): all reported by `portcullis check`, none discovered by a user at run time.
 */
import { readable } from '../config/files.js'
import type { AuthorizationServerConfig, ClientConfig, GatewayConfig } from '../config/schema.js'
import type { Problem } from '../common/problem.js'
import { parseDuration, parseSize } from '../config/units.js'
import { isRedisUrl } from '../redis/url.js'
import { CERTIFICATE_METHODS, lintCertificateClient } from './lint-certificates.js'
import { lintFederation } from './lint-federation.js'
import { redirectUriProblem } from './lint-redirect-uri.js'

/** The grants that can hand out a refresh token; `refresh_token` alone is useless. */
const ISSUES_REFRESH = new Set(['authorization_code', 'password', 'urn:ietf:params:oauth:grant-type:device_code'])

/** refresh_token.reuse_grace and a client's refresh_token_reuse_grace: seconds, never minutes. */
const MAX_REUSE_GRACE_MS = 10_000

function authMethod(client: ClientConfig): string {
  return client.token_endpoint_auth_method ?? (client.client_secret !== undefined || client.client_secret_hash !== undefined ? 'client_secret_basic' : 'none')
}

function lintClient(client: ClientConfig, at: Array<string | number>, problems: Problem[], signingAlgorithm: string): void {
  const method = authMethod(client)
  // The server keeps keys for signing.algorithm and RS256 only (keys.ts): an ID token in any other alg cannot be signed.
  const idTokenAlg = client.id_token_signed_response_alg
  if (idTokenAlg !== undefined && idTokenAlg !== 'RS256' && idTokenAlg !== signingAlgorithm) {
    problems.push({ path: [...at, 'id_token_signed_response_alg'],
      message: `no signing key for ${idTokenAlg}: use RS256 or the access-token algorithm signing.algorithm (${signingAlgorithm})` })
  }
  const secrets = [client.client_secret, client.client_secret_hash].filter((value) => value !== undefined).length
  if (method === 'none' && secrets > 0) problems.push({ path: at, message: 'a public client (token_endpoint_auth_method: none) has no secret' })
  if (CERTIFICATE_METHODS.has(method)) {
    if (secrets > 0) problems.push({ path: at, message: `a ${method} client authenticates with its certificate: it has no secret` })
  } else if (method !== 'none' && secrets !== 1) {
    problems.push({ path: at, message: 'a confidential client needs exactly one of client_secret or client_secret_hash' })
  }
  const grants = new Set(client.grant_types)
  if (grants.has('client_credentials') && method === 'none') {
    problems.push({ path: [...at, 'grant_types'], message: 'client_credentials needs a confidential client (RFC 6749 §4.4)' })
  }
  if (grants.has('password') && !client.first_party) {
    problems.push({ path: [...at, 'grant_types'], message: 'the password grant is for first-party clients only: set first_party: true (RFC 9700 §2.4)' })
  }
  if (grants.has('refresh_token') && ![...grants].some((grant) => ISSUES_REFRESH.has(grant))) {
    problems.push({ path: [...at, 'grant_types'], message: 'refresh_token needs a grant that issues refresh tokens (authorization_code, password or device_code)' })
  }
  const grace = client.refresh_token_reuse_grace
  if (grace !== undefined && parseDuration(grace) > MAX_REUSE_GRACE_MS) {
    problems.push({ path: [...at, 'refresh_token_reuse_grace'], message: 'must be at most 10s (RFC 9700 §4.14.2: a replayed refresh token revokes its grant)' })
  }
  if (grace !== undefined && !grants.has('refresh_token')) {
    problems.push({ path: [...at, 'refresh_token_reuse_grace'], message: 'is only used with the refresh_token grant' })
  }
  const redirects = client.redirect_uris ?? []
  if (grants.has('authorization_code') && redirects.length === 0) {
    problems.push({ path: [...at, 'redirect_uris'], message: 'authorization_code needs at least one redirect URI' })
  }
  if (!grants.has('authorization_code') && redirects.length > 0) {
    problems.push({ path: [...at, 'redirect_uris'], message: 'redirect URIs are only used by authorization_code' })
  }
  redirects.forEach((uri, index) => {
    const problem = redirectUriProblem(uri)
    if (problem) problems.push({ path: [...at, 'redirect_uris', index], message: problem })
  })
}

/** `store.url` and `store.prefix` belong to Redis, which needs the URL; `path` belongs to the others. */
function lintStore(store: AuthorizationServerConfig['store'], at: Array<string | number>, problems: Problem[]): void {
  if (store === undefined) return
  if (store.type !== 'redis') {
    for (const key of ['url', 'prefix'] as const) {
      if (store[key] !== undefined) problems.push({ path: [...at, key], message: `is only used with type: redis (type is ${store.type})` })
    }
    return
  }
  if (store.path !== undefined) problems.push({ path: [...at, 'path'], message: 'is not used with type: redis; set url' })
  if (store.url === undefined) problems.push({ path: at, message: 'type: redis needs url (redis://host:6379 or rediss://host:6380)' })
  else if (!isRedisUrl(store.url)) {
    problems.push({ path: [...at, 'url'], message: 'must be a redis://, rediss://, redis+sentinel://host:26379[,host:port…]/master or redis+cluster://host:port[,host:port…] URL' })
  }
  // Redis Cluster hashes only what is inside the first {…}: every key of the store must land in one slot.
  if (store.prefix !== undefined && !/^[^{]*\{[^}]+\}/.test(store.prefix)) {
    problems.push({ path: [...at, 'prefix'], message: 'must contain a {hash tag}, such as {portcullis}:' })
  }
}

/** `registration` (RFC 7591) settings that would hand out what no user approved, or that cannot work. */
function lintRegistration(registration: AuthorizationServerConfig['registration'], at: Array<string | number>, problems: Problem[]): void {
  if (!registration?.enabled) return
  const policy = registration.policy ?? {}
  const grants = new Set<string>(policy.grant_types ?? ['authorization_code', 'refresh_token'])
  const grantsAt = [...at, 'policy', 'grant_types']
  if (grants.has('client_credentials')) {
    if (!(policy.client_types ?? ['public', 'confidential']).includes('confidential')) {
      problems.push({ path: grantsAt, message: 'client_credentials needs confidential in policy.client_types (RFC 6749 §4.4)' })
    }
    if (registration.initial_access_token === undefined) {
      problems.push({ path: grantsAt, message: 'client_credentials with open registration lets anyone obtain tokens no user approved: set initial_access_token' })
    }
  }
  if (grants.has('refresh_token') && !grants.has('authorization_code') && !grants.has('urn:ietf:params:oauth:grant-type:device_code')) {
    problems.push({ path: grantsAt, message: 'refresh_token needs a grant that issues refresh tokens (authorization_code or device_code)' })
  }
  // A registration must live long enough to be used at least once.
  if (registration.unused_expiry !== undefined && parseDuration(registration.unused_expiry) < 60_000) {
    problems.push({ path: [...at, 'unused_expiry'], message: 'must be at least 1m' })
  }
  if (registration.rate?.window !== undefined && parseDuration(registration.rate.window) < 1000) {
    problems.push({ path: [...at, 'rate', 'window'], message: 'must be at least 1s' })
  }
}

/** A host name, or `*.` and a host name of at least two labels: `*.example.com`, never `*` or `*.com`. */
const HOST_PATTERN = /^(\*\.)?([a-z0-9]([a-z0-9-]*[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]*[a-z0-9])?$/i

/** `client_metadata_documents` (Client ID Metadata Documents). */
function lintClientMetadataDocuments(documents: AuthorizationServerConfig['client_metadata_documents'], at: Array<string | number>,
  problems: Problem[]): void {
  if (!documents?.enabled) return
  ;(documents.allowed_hosts ?? []).forEach((host, index) => {
    if (!HOST_PATTERN.test(host) || (host.startsWith('*.') && host.split('.').length < 3)) {
      problems.push({ path: [...at, 'allowed_hosts', index], message: 'must be a host name, or *. and a domain of at least two labels such as *.example.com' })
    }
  })
  if (documents.max_size !== undefined && (parseSize(documents.max_size) > 65_536 || parseSize(documents.max_size) < 256)) {
    problems.push({ path: [...at, 'max_size'], message: 'must be between 256b and 64kb' })
  }
  if (documents.timeout !== undefined && (parseDuration(documents.timeout) < 100 || parseDuration(documents.timeout) > 30_000)) {
    problems.push({ path: [...at, 'timeout'], message: 'must be between 100ms and 30s' })
  }
  const min = parseDuration(documents.cache_ttl?.min ?? '1m')
  const max = parseDuration(documents.cache_ttl?.max ?? '24h')
  if (min > max) problems.push({ path: [...at, 'cache_ttl'], message: 'min must not be greater than max' })
  if (max > 7 * 86_400_000) problems.push({ path: [...at, 'cache_ttl', 'max'], message: 'must be at most 7d' })
  if (documents.ca_file !== undefined && !readable(documents.ca_file)) problems.push({ path: [...at, 'ca_file'], message: `cannot read ${documents.ca_file}` })
}

/** Insecure but legal `authorization_server` settings: part of configWarnings (logged at start, printed by `check`). */
export function authorizationServerWarnings(config: GatewayConfig): string[] {
  const as = config.authorization_server
  if (!as?.enabled) return []
  const warnings: string[] = []
  const type = as.store?.type ?? 'sqlite'
  // A memory store keeps its keys in the process: nothing is at rest.
  if (type !== 'memory' && as.signing?.key_encryption_key === undefined) {
    warnings.push(`authorization_server.signing.key_encryption_key is not set: the private signing keys are stored in clear in ${type === 'redis' ? 'Redis' : 'the SQLite file'}; ` +
      'whoever reads it, or a backup of it, can sign tokens')
  }
  const registration = as.registration
  if (registration?.enabled && registration.initial_access_token === undefined) {
    warnings.push(`authorization_server.registration is open (no initial_access_token): anyone who can reach ${as.issuer ?? '{issuer}'}/register can register a client ` +
      '(each still needs a user\'s consent; registration.rate bounds registrations per address)')
  }
  const documents = as.client_metadata_documents
  if (documents?.enabled && documents.allow_private_addresses) {
    warnings.push('authorization_server.client_metadata_documents.allow_private_addresses is true: any client_id URL may make this server ' +
      'fetch from loopback and private addresses (and over http on loopback); for development only')
  }
  if (documents?.enabled && (documents.scopes ?? []).length === 0) {
    warnings.push('authorization_server.client_metadata_documents.scopes is empty: clients known by a metadata document can be given no scope')
  }
  if (registration?.enabled && (registration.policy?.scopes ?? []).length === 0) {
    warnings.push('authorization_server.registration.policy.scopes is empty: registered clients can be given no scope')
  }
  // RFC 9449 §8: without a shared secret each process signs its own nonces, which the other instances refuse.
  if (type === 'redis' && config.dpop?.nonce && config.dpop.nonce_secret === undefined) {
    warnings.push('dpop.nonce is on with a Redis store but dpop.nonce_secret is not set: each instance makes its own DPoP nonces, ' +
      'so a client sent to another instance gets use_dpop_nonce again; set the same nonce_secret on every instance')
  }
  return warnings
}

export function lintAuthorizationServer(config: GatewayConfig): Problem[] {
  const as: AuthorizationServerConfig | undefined = config.authorization_server
  if (!as?.enabled) return []
  const problems: Problem[] = []
  const base = ['authorization_server']
  if (as.issuer === undefined) problems.push({ path: base, message: 'missing required key "issuer"' })
  else if (!URL.canParse(as.issuer)) problems.push({ path: [...base, 'issuer'], message: 'is not a valid URL' })
  if (as.issuer !== undefined && (config.issuers ?? []).some((issuer) => issuer.issuer === as.issuer)) {
    problems.push({ path: [...base, 'issuer'], message: 'is also listed under issuers: the embedded issuer is trusted automatically' })
  }
  lintStore(as.store, [...base, 'store'], problems)
  lintRegistration(as.registration, [...base, 'registration'], problems)
  lintClientMetadataDocuments(as.client_metadata_documents, [...base, 'client_metadata_documents'], problems)
  // RFC 6749 §4.1.2: a code lives "a maximum of 10 minutes"; it is redeemed within seconds.
  const codeTtl = as.authorization_code?.ttl
  if (codeTtl !== undefined && (parseDuration(codeTtl) < 1000 || parseDuration(codeTtl) > 600_000)) {
    problems.push({ path: [...base, 'authorization_code', 'ttl'], message: 'must be between 1s and 10m (RFC 6749 §4.1.2)' })
  }
  // RFC 9700 §4.14.2: every reuse should revoke; a grace only covers a client racing itself, for seconds.
  const grace = as.refresh_token?.reuse_grace
  if (grace !== undefined && parseDuration(grace) > MAX_REUSE_GRACE_MS) {
    problems.push({ path: [...base, 'refresh_token', 'reuse_grace'], message: 'must be at most 10s (RFC 9700 §4.14.2: a replayed refresh token revokes its grant)' })
  }
  const clientIds = new Map<string, number>()
  ;(as.clients ?? []).forEach((client, index) => {
    const at = [...base, 'clients', index]
    if (clientIds.has(client.client_id)) problems.push({ path: [...at, 'client_id'], message: `duplicate client_id (also clients[${clientIds.get(client.client_id)}])` })
    clientIds.set(client.client_id, index)
    lintClient(client, at, problems, as.signing?.algorithm ?? 'ES256')
    lintCertificateClient(config, client, at, problems)
  })
  const usernames = new Map<string, number>()
  ;(as.users ?? []).forEach((user, index) => {
    const at = [...base, 'users', index]
    if (usernames.has(user.username)) problems.push({ path: [...at, 'username'], message: `duplicate username (also users[${usernames.get(user.username)}])` })
    usernames.set(user.username, index)
    if ([user.password, user.password_hash].filter((value) => value !== undefined).length !== 1) {
      problems.push({ path: at, message: 'set exactly one of password or password_hash' })
    }
    // RFC 9068 §5: client_credentials tokens carry sub = client_id, so a user must never share it.
    const sub = user.sub ?? user.username
    if (clientIds.has(sub)) problems.push({ path: [...at, user.sub !== undefined ? 'sub' : 'username'], message: `subject "${sub}" equals a client_id` })
  })
  lintFederation(config, as, problems)
  return problems
}
