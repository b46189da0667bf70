/**
 * createAuthServer: opens the store and keys, mounts the endpoints under the issuer's path on the public
 * listener (in their own fastify scope: form bodies, errors per RFC 6749 §5.2), and hands the gateway
 * what it needs to trust the embedded issuer in-process.
 */
import { readFileSync } from 'node:fs'
import type { FastifyBaseLogger, FastifyError, FastifyInstance } from 'fastify'
import cookie from '@fastify/cookie'
import csrf from '@fastify/csrf-protection'
import formbody from '@fastify/formbody'
import type { EmbeddedIssuer } from '../authn/authenticator.js'
import { audienceMatches, type Principal } from '../common/principal.js'
import type { AuthorizationServerConfig, DpopConfig } from '../config/schema.js'
import { memoryReplayCache, sharedReplayCache, type ReplayCache, type SharedOnce } from '../dpop/replay.js'
import { silentAudit, type AuditLog } from '../audit/audit.js'
import { Metrics } from '../metrics/metrics.js'
import { InvalidRequest, ServerError } from '../errors/oauth-errors.js'
import { ClientRegistry } from './clients.js'
import type { AuthServerContext } from './context.js'
import { registerDeviceAuthorization } from './endpoints/device-authorization.js'
import { registerIntrospection } from './endpoints/introspect.js'
import { DEVICE_CODE_GRANT_TYPE } from './grant-types.js'
import { registerJwks } from './endpoints/jwks.js'
import { registerMetadata } from './endpoints/metadata.js'
import { registerRegistration } from './endpoints/register.js'
import { registerRevocation } from './endpoints/revoke.js'
import { registerTokenEndpoint } from './endpoints/token.js'
import { registerUserinfo } from './endpoints/userinfo.js'
import { createGrantMap } from './grants/index.js'
import { sendOAuthError } from './http.js'
import { KeyManager, keyRetirementSeconds } from './keys.js'
import { Registrations } from './registration/registrations.js'
import { ClientMetadataDocuments } from './client-metadata/documents.js'
import { RevocationList } from './revocations.js'
import { resolveSettings, type AuthServerSettings } from './settings.js'
import type { StorageAdapter } from './storage/adapter.js'
import { openStore } from './store.js'
import type { Broadcast } from './broadcast.js'
import { createThrottle, INTERACTION_LIMITS, redisLimiter, USER_CODE_LIMITS, type LimiterFactory, type ThrottleEngaged } from './throttle.js'
import { cookieOptions, CSRF_COOKIE } from './browser/session.js'
import { registerAuthorize } from './endpoints/authorize.js'
import { registerConsent } from './endpoints/consent.js'
import { registerDevicePage } from './endpoints/device.js'
import { registerLogin } from './endpoints/login.js'
import { registerFederatedLogin } from './endpoints/federated-login.js'
import { registerLogout } from './endpoints/logout.js'
import { AccountDirectory } from './federation/accounts.js'
import { IdentityProviders } from './federation/providers.js'
import { OPAQUE_ACCESS_TOKEN_PREFIX, TokenService, type StoredAccessToken } from './tokens.js'
import { UserDirectory } from './users.js'

/** The grants /token serves so far (the grant map); metadata lists those some client is registered for. */
const IMPLEMENTED_GRANTS: ReadonlySet<string> = new Set(['authorization_code', 'client_credentials', 'refresh_token', 'password',
  DEVICE_CODE_GRANT_TYPE])

/** Form bodies are small (node-oidc-provider caps them at 56 KiB); 64 KiB here. */
const FORM_BODY_LIMIT = 64 * 1024

export interface AuthServer {
  readonly ctx: AuthServerContext
  /** The exact paths this server answers on the public listener (the gateway sends them to fastify). */
  readonly paths: readonly string[]
  readonly embedded: EmbeddedIssuer
  close(): Promise<void>
}

export interface AuthServerOptions {
  now?: () => number
  /** Where tokens issued and token endpoint errors are counted. */
  metrics?: Metrics
  /** Where security events go (the gateway's `audit.output`); none by default. */
  audit?: AuditLog
  /** The gateway's `resources[].resource` identifiers (RFC 9728): resources clients may ask for (RFC 8707). */
  resources?: readonly string[]
  /** The top-level `dpop:` section: how /token checks DPoP proofs (RFC 9449), with defaults when absent. */
  dpop?: DpopConfig | undefined
  /**
   * A worker of several on one machine (`server.workers`): revocations travel to the other workers
   * on this channel, and the brute-force counters are `limiter`'s (kept by the primary). A Redis store's own
   * channel and counters take precedence: they reach every worker of every instance.
   */
  workers?: { readonly broadcast: Broadcast; readonly limiter: LimiterFactory; readonly once: SharedOnce } | undefined
  /** `server.allow_insecure_http`: an identity provider may be reached over http:// off loopback. */
  allowInsecureHttp?: boolean
}

function principalOf(record: StoredAccessToken, settings: AuthServerSettings): Principal {
  const aud = Array.isArray(record.aud) ? record.aud : undefined
  return {
    issuer: settings.issuer,
    subject: record.sub,
    clientId: record.clientId,
    scopes: record.scope === '' ? [] : record.scope.split(' '),
    expiresAt: record.exp,
    jti: record.jti,
    // RFC 8707: what the token was issued for, so resource routes read it as they read a JWT's aud.
    ...(aud !== undefined && { audience: aud }),
    // Issued for resources only (none of `access_token.audience`): accepted on their routes alone.
    ...(aud !== undefined && !audienceMatches(aud, settings.audience) && { resourceOnly: true as const }),
    // RFC 9449 §6: the key a bound token must be presented with, as a JWT's cnf.jkt.
    ...(typeof record.jkt === 'string' && { jkt: record.jkt }),
    // RFC 8705 §3: the certificate a bound token must be presented over, as a JWT's cnf.x5t#S256.
    ...(typeof record.x5t === 'string' && { x5t: record.x5t }),
    // `access_token.claims`, as a JWT carries them.
    ...(typeof record.claims === 'object' && record.claims !== null && { claims: record.claims as Record<string, unknown> }),
  }
}

/**
 * RFC 9449 §11.1: where /token remembers the proofs it accepted. In the store when it is shared (Redis: one
 * SET NX per proof, so a proof used at one instance is refused at every other), else in the process.
 */
function replayCacheFor(store: StorageAdapter, size: number, workers?: SharedOnce): ReplayCache {
  const firstUse = store.firstUse?.bind(store)
  if (firstUse) return sharedReplayCache({ firstUse })
  // Several workers on one store (`server.workers`): the primary remembers the proofs for all of them.
  return workers ? sharedReplayCache(workers) : memoryReplayCache(size)
}

/** Fastify's own request errors (wrong content type, body too large, bad form) as RFC 6749 errors. */
function asOAuthError(error: FastifyError): unknown {
  if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    return new InvalidRequest(error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
      ? 'the body must be application/x-www-form-urlencoded'
      : 'the request body cannot be read')
  }
  return new ServerError(error)
}

/** The Redis connections beside the store's: the revocation channel, and the shared throttle counters. */
async function connectShared(url: string, prefix: string, log: FastifyBaseLogger) {
  const [{ createRedisBroadcast, revocationChannel }, { connectRedis }] = await Promise.all([import('./broadcast.js'), import('../redis/connection.js')])
  const broadcast = createRedisBroadcast(url, revocationChannel(prefix), log)
  // Fail fast (the insurance limiter in memory takes over), never hang a request on a frozen Redis.
  // 0.5 s, then the throttle counts in memory (throttle.ts); with the store's 1.5 s, a Redis that hangs gets a 503 within 2 s.
  const limiterClient = connectRedis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 500, socketTimeout: 10_000 })
  limiterClient.on('error', (error: Error) => log.debug({ err: error }, 'throttle store error'))
  return {
    broadcast,
    limiterClient,
    close: async () => {
      await Promise.allSettled([broadcast.close(), limiterClient.quit()])
      limiterClient.disconnect()
    },
  }
}

export async function createAuthServer(app: FastifyInstance, config: AuthorizationServerConfig,
  options: AuthServerOptions = {}): Promise<AuthServer> {
  const now = options.now ?? Date.now
  const settings = resolveSettings(config, options.resources, options.dpop, now)
  const log = app.log.child({ component: 'authorization-server' })
  const store = await openStore(settings, now, log)
  const keys = await KeyManager.open(store, {
    algorithm: settings.algorithm,
    publishDelayMs: settings.publishDelayMs,
    // An old key stays published until every token it signed has expired, with a margin (OIDC Core §10.1.1).
    retireAfterSeconds: keyRetirementSeconds(settings),
    now,
    log,
    ...(settings.keyEncryption && { keyEncryption: settings.keyEncryption }),
  }).catch(async (error: unknown) => {
    // A wrong key_encryption_key: the gateway does not start, and the store's connection must not keep the process alive.
    await store.close().catch(() => {})
    throw error
  })
  const revocations = new RevocationList(store, now, log)
  await revocations.load()
  // Several instances on one Redis: revocations travel between them, and brute-force counters are shared.
  const shared = settings.store.type === 'redis' ? await connectShared(settings.store.url!, settings.store.prefix, log) : undefined
  const broadcast = shared?.broadcast ?? options.workers?.broadcast
  if (broadcast) {
    revocations.onKeysChanged = () => keys.reloadInBackground()
    revocations.attach(broadcast)
  }
  const limiter = shared ? redisLimiter(shared.limiterClient, settings.store.prefix) : options.workers?.limiter
  const audit = options.audit ?? silentAudit
  const onEngaged: ThrottleEngaged = ({ throttle, key, retryAfterSeconds }) =>
    audit.emit('throttle.engaged', { throttle, key, retry_after: retryAfterSeconds })
  const users = new UserDirectory(config.users ?? [])
  const identityProviders = await IdentityProviders.open(config.identity_providers ?? [], options.allowInsecureHttp ?? false, now)
  const accounts = new AccountDirectory(users, store, {
    providers: new Set(identityProviders.list().map((provider) => provider.settings.id)),
    ttlSeconds: settings.refreshTokenTtlSeconds + settings.sessionTtlSeconds,
    kek: settings.keyEncryption,
  })
  const configuredIds = new Set((config.clients ?? []).map((client) => client.client_id))
  // An RFC 7591 registration never takes a YAML client_id, nor a user's sub (client_credentials tokens carry sub = client_id).
  const registrations = settings.registration && new Registrations(store, settings.registration, now,
    (id) => configuredIds.has(id) || users.findBySub(id) !== undefined)
  const documentSettings = settings.clientMetadataDocuments
  const documents = documentSettings && new ClientMetadataDocuments(documentSettings, now,
    documentSettings.caFile !== undefined ? { ca: readFileSync(documentSettings.caFile, 'utf8') } : {})
  const ctx: AuthServerContext = {
    settings,
    store,
    keys,
    clients: new ClientRegistry(config.clients ?? [], registrations, documents),
    users,
    accounts,
    identityProviders,
    tokens: new TokenService(settings, keys, store, now),
    revocations,
    throttle: createThrottle(settings, limiter, 'failures', onEngaged),
    userCodeThrottle: createThrottle(USER_CODE_LIMITS, limiter, 'user-codes', onEngaged),
    interactionThrottle: createThrottle(INTERACTION_LIMITS, limiter, 'interactions', onEngaged),
    now,
    log,
    metrics: options.metrics ?? new Metrics({ defaultMetrics: false }),
    audit,
    dpopReplay: replayCacheFor(store, settings.dpop.replayCacheSize, options.workers?.once),
  }
  const paths: string[] = []
  await app.register(async (scope) => {
    // Form bodies only (RFC 6749 §3.2, §4.1.3); without this, fastify's JSON parser would still answer for this scope.
    scope.removeAllContentTypeParsers()
    await scope.register(formbody, { bodyLimit: FORM_BODY_LIMIT })
    scope.setErrorHandler((error: FastifyError, _request, reply) => sendOAuthError(reply, asOAuthError(error), settings.issuer))
    // The pages' cookies (the login session, the CSRF secret): parsed only for this scope's routes.
    await scope.register(cookie)
    // RFC 6749 §10.12: every page form carries a token made from a per-browser secret kept in an HttpOnly cookie.
    await scope.register(csrf, {
      cookieKey: CSRF_COOKIE,
      cookieOpts: cookieOptions(ctx),
      getToken: (request) => (request.body as Record<string, unknown> | undefined)?._csrf as string | undefined,
    })
    // RFC 9700 §2.6: browser apps may call the token, revocation, userinfo and registration endpoints cross-origin; never the pages.
    const corsPaths = new Set([`${settings.prefix}/token`, `${settings.prefix}/revoke`, `${settings.prefix}/userinfo`, `${settings.prefix}/register`])
    scope.addHook('onSend', async (request, reply) => {
      if (corsPaths.has(request.routeOptions.url ?? '')) {
        reply.header('access-control-allow-origin', '*').header('access-control-expose-headers', 'www-authenticate, retry-after, dpop-nonce')
      }
    })
    paths.push(
      ...registerTokenEndpoint(scope, ctx, createGrantMap()),
      ...registerRevocation(scope, ctx),
      ...registerIntrospection(scope, ctx),
      ...registerDeviceAuthorization(scope, ctx),
      ...registerJwks(scope, ctx),
      ...registerUserinfo(scope, ctx),
      ...registerAuthorize(scope, ctx),
      ...registerLogin(scope, ctx),
      ...registerFederatedLogin(scope, ctx),
      ...registerLogout(scope, ctx),
      ...registerConsent(scope, ctx),
      ...registerDevicePage(scope, ctx),
      ...(registrations ? registerRegistration(scope, ctx, {
        registrations,
        throttle: createThrottle({
          failuresPerClient: settings.registration!.registrationsPerWindow, failuresPerIp: settings.registration!.registrationsPerWindow,
          throttleWindowSeconds: settings.registration!.windowSeconds,
        }, limiter, 'registrations', onEngaged),
      }) : []),
      ...registerMetadata(scope, ctx, {
        implemented: new Set(['token', 'revocation', 'introspection', 'jwks', 'userinfo', 'id_token', 'dpop', 'end_session',
          ...(registrations ? ['registration'] : []),
          ...(documents ? ['client_metadata_documents'] : []),
          ...(settings.grantTypes.has('authorization_code') ? ['authorization'] : []),
          ...(settings.grantTypes.has(DEVICE_CODE_GRANT_TYPE) ? ['device_authorization'] : []),
          ...[...settings.grantTypes].filter((grant) => IMPLEMENTED_GRANTS.has(grant)).map((grant) => `grant:${grant}`)]),
        protectedResources: options.resources ?? [],
      }),
    )
  })

  const embedded: EmbeddedIssuer = {
    policy: {
      issuer: settings.issuer,
      audience: [...settings.resourceIndicators],
      algorithms: [settings.algorithm],
      require_typ: 'at+jwt',
    },
    ownAudience: settings.audience,
    getKey: keys.getKey,
    ownsOpaque: (token) => token.startsWith(OPAQUE_ACCESS_TOKEN_PREFIX),
    lookupOpaque: async (hashOfToken) => {
      const record = await store.find('access_token', hashOfToken) as StoredAccessToken | undefined
      return record && record.exp * 1000 > now() ? principalOf(record, settings) : undefined
    },
    isRevoked: (principal) => revocations.isRevoked(principal.jti),
  }
  return {
    ctx,
    paths,
    embedded,
    close: async () => {
      keys.close()
      await Promise.all([store.close(), shared?.close(), documents?.close()])
    },
  }
}
