/**
 * The store for several instances: one Redis (`store.type: redis`) through ioredis. Every write that must be
 * atomic (upsert with its indexes, consume, consumeAndWrite, destroy, revokeByGrantId, purge) is one Lua script, so Redis runs
 * it alone; nothing is read in Node and then written back.
 *
 * Keys, all under `prefix` (default `{portcullis}:`; its `{…}` hash tag keeps every key in one Cluster slot):
 *   a:<kind>:<id>   hash  v (the JSON), e (expiry, ms), c (consumed at, ms), g (grantId), u (userCode),
 *                         r (the consumeAndWrite that consumed it: what its undo checks)
 *   k:<kind>        zset  id scored by its expiry: list and purgeExpired
 *   g:<grantId>     set   "<kind>:<id>" of the grant's artifacts: revokeByGrantId
 *   u:<userCode>    set   device_code ids with that user code: findByUserCode
 *   lock:<name>     string  withLock's lease
 *   once:<id>       string  firstUse's mark, with a Redis TTL: the only keys whose lifetime is Redis' own clock
 * Time is the injected `now`, passed to every script: an artifact is live while `e` > now. Every key also
 * gets a Redis TTL (the artifact's lifetime plus TTL_MARGIN_MS) so Redis frees what nobody purges; that TTL
 * is for memory only, never for correctness.
 */
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { connectRedis } from '../../redis/connection.js'
import { describeRedisUrl } from '../../redis/url.js'
import { PRELUDE, SCRIPTS } from './redis-scripts.js'
import { TemporarilyUnavailable } from '../../errors/oauth-errors.js'
import type { ArtifactKind, ArtifactRecord, ArtifactWrite, FoundArtifact, StorageAdapter, StorageOptions, StoredArtifact } from './adapter.js'

export interface RedisStorageOptions extends StorageOptions {
  /** Prepended to every key; must contain a `{…}` hash tag (Redis Cluster). Default `{portcullis}:`. */
  prefix?: string
  /** How long a command may take before the operation fails with 503 (default 1500 ms: with the throttle's 500 ms, 2 s). */
  commandTimeoutMs?: number
  /** Index entries of expired artifacts are cleared this often (default 60 s; 0 turns the timer off). */
  purgeIntervalMs?: number
  log?: Pick<FastifyBaseLogger, 'info' | 'warn'>
}

/** Redis keeps a key this long past its artifact's expiry: clock differences between instances, latency. */
const TTL_MARGIN_MS = 5 * 60_000
/** What Retry-After says while Redis cannot be reached: ioredis reconnects within a second. */
const RETRY_AFTER_SECONDS = 1
/** A connection that has not answered for this long is dropped and re-opened (a dead peer, a partition). */
const SOCKET_TIMEOUT_MS = 10_000
const PURGE_BATCH = 500
const LOCK_LEASE_MS = 30_000
const LOCK_POLL_MS = 50

/** Every kind, checked against ArtifactKind by the compiler: purgeExpired visits each index. */
const KINDS = Object.keys({
  access_token: 1, refresh_token: 1, authorization_code: 1, device_code: 1, revoked_jti: 1, signing_key: 1, grant: 1,
  session: 1, interaction: 1, consent: 1, refresh_successor: 1, registered_client: 1,
  federated_login: 1, account: 1, logout: 1,
} satisfies Record<ArtifactKind, 1>) as ArtifactKind[]

type Script = (...args: string[]) => Promise<unknown>
type Scripts = Record<keyof typeof SCRIPTS | 'storeUnlock', Script>

function hashTagOf(prefix: string): string | undefined {
  const open = prefix.indexOf('{')
  const close = prefix.indexOf('}', open + 1)
  return open >= 0 && close > open + 1 ? prefix.slice(open + 1, close) : undefined
}

/**
 * Connects to the Redis at `url` (`redis://` or `rediss://`) and resolves once it answers; rejects when it
 * cannot be reached. Afterwards a failing Redis makes each operation reject with TemporarilyUnavailable (503,
 * Retry-After) at once or after `commandTimeoutMs`, while ioredis reconnects in the background.
 */
export async function createRedisAdapter(url: string, options: RedisStorageOptions = {}): Promise<StorageAdapter> {
  const now = options.now ?? Date.now
  const prefix = options.prefix ?? '{portcullis}:'
  if (hashTagOf(prefix) === undefined) throw new RangeError(`the Redis key prefix must contain a {hash tag}, got ${JSON.stringify(prefix)}`)
  const purgeIntervalMs = options.purgeIntervalMs ?? 60_000
  if (!Number.isFinite(purgeIntervalMs) || purgeIntervalMs < 0) throw new RangeError('purgeIntervalMs must be 0 or a positive number')
  const log = options.log

  const client = connectRedis(url, {
    lazyConnect: true,
    // Fail fast instead of queueing while disconnected, and never re-send a command that may have run
    // (a consume sent twice would refuse the caller its own refresh token).
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    commandTimeout: options.commandTimeoutMs ?? 1500,
    socketTimeout: SOCKET_TIMEOUT_MS,
    connectTimeout: 5000,
    retryStrategy: (attempt) => Math.min(attempt * 100, 1000),
  })
  for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { numberOfKeys: name === 'storeRevoke' ? 2 : 1, lua: PRELUDE + lua })
  client.defineCommand('storeUnlock', { numberOfKeys: 1, lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 1" })
  const scripts = client as unknown as Scripts

  // An 'error' event without a listener would crash the process. One line per outage, one when it ends.
  let lastError: Error | undefined
  let healthy = false
  client.on('error', (error: Error) => {
    lastError = error
    if (healthy) log?.warn({ err: error }, 'the Redis store is unreachable; store operations answer 503 until it is back')
    healthy = false
  })
  client.on('ready', () => {
    if (!healthy && lastError) log?.info('the Redis store is reachable again')
    healthy = true
  })
  try {
    await client.connect()
  } catch (error) {
    client.disconnect()
    // ioredis rejects with "Connection is closed."; the 'error' event before it says why (ECONNREFUSED, auth).
    throw new Error(`cannot connect to the Redis store at ${describeRedisUrl(url)}: ${(lastError ?? error as Error).message}`, { cause: error })
  }
  lastError = undefined

  const unavailable = (error: unknown) => new TemporarilyUnavailable(`redis store: ${(error as Error).message}`, RETRY_AFTER_SECONDS, error)
  const guard = async <T>(operation: () => Promise<T>): Promise<T> => {
    try {
      return await operation()
    } catch (error) {
      throw unavailable(error)
    }
  }
  const artifactKey = (kind: ArtifactKind, id: string) => `${prefix}a:${kind}:${id}`

  /** kind, id, value, expiresAt, px, grantId or '', userCode or '': what the scripts' `put` takes. */
  const putArguments = ({ kind, id, value, expiresInSeconds }: ArtifactWrite): string[] => {
    const px = Math.ceil(Math.max(0, expiresInSeconds) * 1000) + TTL_MARGIN_MS
    const grantId = typeof value.grantId === 'string' ? value.grantId : ''
    const userCode = kind === 'device_code' && typeof value.userCode === 'string' ? value.userCode : ''
    return [kind, id, JSON.stringify(value), String(now() + expiresInSeconds * 1000), String(px), grantId, userCode]
  }

  let warned = false
  /** The stored JSON, or undefined when it cannot be read: such an artifact is treated as missing. */
  const parse = (kind: ArtifactKind, text: string, consumedAt: string | null): FoundArtifact | undefined => {
    try {
      const value = JSON.parse(text) as unknown
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError('not an object')
      return consumedAt === null || consumedAt === '' ? value as StoredArtifact : { ...value, consumedAt: Number(consumedAt) }
    } catch {
      // Name the kind only: ids are token hashes, and the value may hold anything.
      if (!warned) process.emitWarning(`unreadable ${kind} artifact in the Redis store, treated as missing`, 'PortcullisStoreWarning')
      warned = true
      return undefined
    }
  }

  const purgeExpired = () => guard(async () => {
    const at = String(now())
    let total = 0
    for (const kind of KINDS) {
      for (;;) {
        const [count, seen] = await scripts.storePurge(`${prefix}k:${kind}`, prefix, kind, at, String(PURGE_BATCH)) as [number, number]
        total += count
        if (seen < PURGE_BATCH) break
      }
    }
    return total
  })
  const timer = purgeIntervalMs > 0 ? setInterval(() => { purgeExpired().catch(() => { /* next tick retries */ }) }, purgeIntervalMs) : undefined
  timer?.unref()
  let closed = false

  return {
    async upsert(kind, id, value, expiresInSeconds) {
      if (!Number.isFinite(expiresInSeconds)) throw new RangeError('expiresInSeconds must be a finite number')
      const args = putArguments({ kind, id, value, expiresInSeconds })
      await guard(() => scripts.storeUpsert(artifactKey(kind, id), prefix, ...args))
    },
    async find(kind, id) {
      const [text, expiresAt, consumedAt] = await guard(() => client.hmget(artifactKey(kind, id), 'v', 'e', 'c'))
      if (typeof text !== 'string' || typeof expiresAt !== 'string' || Number(expiresAt) <= now()) return undefined
      return parse(kind, text, consumedAt ?? null)
    },
    async findByUserCode(userCode) {
      const found = await guard(() => scripts.storeFindByUserCode(`${prefix}u:${userCode}`, prefix, userCode, String(now()))) as [string, string] | null
      return found === null ? undefined : parse('device_code', found[0], found[1])
    },
    async consume(kind, id) {
      return (await guard(() => scripts.storeConsume(artifactKey(kind, id), prefix, String(now())))) === 1
    },
    async consumeAndWrite(kind, id, writes, requires) {
      for (const { expiresInSeconds } of writes) if (!Number.isFinite(expiresInSeconds)) throw new RangeError('expiresInSeconds must be a finite number')
      const key = artifactKey(kind, id)
      const rotation = randomUUID()
      const args = [String(now()), rotation, requires?.kind ?? '', requires?.id ?? '', ...writes.flatMap(putArguments)]
      try {
        return (await scripts.storeConsumeAndWrite(key, prefix, ...args)) === 1
      } catch (error) {
        // The script may have run although its reply never came (a timeout while Redis hangs): then the
        // artifact is consumed and the writes are stored, for a caller about to answer 503. Taking them back
        // makes that 503 true, so a retry starts afresh. Sent on the same connection, the undo runs after the
        // script whenever Redis gets to them (a paused Redis runs both once it resumes); not awaited, it
        // would only wait as long again.
        scripts.storeUndoConsume(key, prefix, rotation, ...writes.flatMap((write) => [write.kind, write.id])).catch((undoError: unknown) => {
          log?.warn({ err: undoError }, 'the Redis store could not take back a consume whose reply was lost')
        })
        throw unavailable(error)
      }
    },
    async destroy(kind, id) {
      await guard(() => scripts.storeDestroy(artifactKey(kind, id), prefix, kind, id))
    },
    async revokeByGrantId(grantId) {
      const flat = await guard(() => scripts.storeRevoke(`${prefix}g:${grantId}`, artifactKey('grant', grantId), prefix, grantId)) as string[]
      const deleted: ArtifactRecord[] = []
      for (let i = 0; i < flat.length; i += 5) {
        const kind = flat[i] as ArtifactKind
        // An unreadable artifact is deleted too, and still reported so that its id can be deny-listed.
        deleted.push({ kind, id: flat[i + 1]!, value: parse(kind, flat[i + 2]!, flat[i + 4]!) ?? {}, expiresAt: Number(flat[i + 3]) })
      }
      return deleted
    },
    async list(kind) {
      const flat = await guard(() => scripts.storeList(`${prefix}k:${kind}`, prefix, kind, String(now()))) as string[]
      const listed: ArtifactRecord[] = []
      for (let i = 0; i < flat.length; i += 4) {
        const value = parse(kind, flat[i + 1]!, flat[i + 3]!)
        if (value) listed.push({ kind, id: flat[i]!, value, expiresAt: Number(flat[i + 2]) })
      }
      return listed
    },
    purgeExpired,
    async withLock(name, task) {
      const key = `${prefix}lock:${name}`
      const token = randomUUID()
      // A lease in Redis' own time: it bounds how long a crashed holder blocks the others, nothing more.
      while (await guard(() => client.set(key, token, 'PX', LOCK_LEASE_MS, 'NX')) === null) {
        await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS))
      }
      try {
        return await task()
      } finally {
        await scripts.storeUnlock(key, token).catch(() => { /* the lease runs out by itself */ })
      }
    },
    async firstUse(id, expiresInSeconds) {
      if (!Number.isFinite(expiresInSeconds)) throw new RangeError('expiresInSeconds must be a finite number')
      // One SET NX: of any number of instances, exactly one is told it is first. Redis expires the mark.
      const seconds = String(Math.max(1, Math.ceil(expiresInSeconds)))
      return await guard(() => client.set(`${prefix}once:${id}`, '1', 'EX', seconds, 'NX')) === 'OK'
    },
    async ping() {
      await guard(() => client.ping())
    },
    async close() {
      if (closed) return
      closed = true
      clearInterval(timer)
      try {
        if (client.status === 'ready') await client.quit()
      } catch {
        // Closing anyway.
      } finally {
        client.disconnect()
      }
    },
  }
}
