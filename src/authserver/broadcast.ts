/**
 * Revocation broadcast between instances sharing one Redis: every revocation an
 * instance makes is published on a channel; every other instance applies it to its deny-list and its
 * gateway caches as it arrives (well within a second).
 *
 * Pub/sub delivers at most once, so every message carries a sequence number taken from a counter in the
 * same Lua script that publishes it (one Redis runs both, so messages arrive in counter order). An
 * instance that sees a number skipped, sees the counter ahead of what it received (checked every
 * CHECK_INTERVAL_MS, which also catches the last message of a burst going missing), or loses its
 * subscription, has missed something: it reloads the deny-list from the store and drops its cached
 * embedded-issuer tokens, so it never keeps serving a token revoked while it was away. That holds for a
 * silent re-subscription too (ioredis' Cluster client moves its subscriber to another node on its own).
 */
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { connectRedis } from '../redis/connection.js'

/**
 * What travels on the channel: a JWT's jti with its exp (seconds), or an opaque token's hash; or `keys`,
 * sent by `portcullis keys rotate`: the signing keys in the store changed, reload them now.
 */
export interface RevocationMessage {
  readonly jti?: { readonly jti: string; readonly exp: number }
  readonly tokenHash?: string
  readonly keys?: true
}

export interface Broadcast {
  /** Resolves once Redis took the message, or once every retry failed (logged); never rejects. */
  publish(message: RevocationMessage): Promise<void>
  /** `onMessage` for every other instance's revocation; `onResync` after messages may have been missed. */
  subscribe(onMessage: (message: RevocationMessage) => void, onResync: () => void): void
  close(): Promise<void>
}

interface Envelope extends RevocationMessage { readonly origin: string }

/** How often the counter is compared with what arrived. */
const CHECK_INTERVAL_MS = 1000
/** A counter ahead of what arrived may be a message still on its way: it counts as missed after this long. */
const IN_FLIGHT_GRACE_MS = 250
/** A failed publish is retried this many times, this far apart (a repeated revocation is harmless). */
const PUBLISH_ATTEMPTS = 5
const PUBLISH_RETRY_MS = 500
/** The counter's TTL, renewed by every publish: a counter that expired reads as 0, which forces a resync. */
const SEQUENCE_TTL_MS = 7 * 24 * 3600 * 1000

// KEYS[1] the counter; ARGV channel, message, ttl. The message goes out as "<sequence> <json>".
const PUBLISH_LUA = `
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[1], n .. ' ' .. ARGV[2])
return n`

/** The CLIENT SETNAME of an instance's subscribed connection. */
export function subscriberName(channel: string): string {
  return `portcullis:sub:${channel}`
}

type Publisher = { revocationPublish(counter: string, channel: string, message: string, ttl: string): Promise<number> }

/** The channel of a store prefix: deployments (and tests) sharing one Redis never hear each other. */
export function revocationChannel(prefix: string): string {
  return `${prefix}revocations`
}

export function createRedisBroadcast(url: string, channel: string, log: Pick<FastifyBaseLogger, 'debug' | 'warn' | 'error'>): Broadcast {
  const origin = randomUUID()
  // The counter shares the channel's name, and so the store prefix's {hash tag}: one Cluster slot.
  const counter = `${channel}:seq`
  // Named, so that CLIENT LIST tells which deployment's channel a connection serves.
  const publisher = connectRedis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 1000, connectionName: `portcullis:pub:${channel}` })
  publisher.defineCommand('revocationPublish', { numberOfKeys: 1, lua: PUBLISH_LUA })
  // A subscribed connection can do nothing else: its own client.
  const subscriber = connectRedis(url, { enableOfflineQueue: true, connectionName: subscriberName(channel) })
  // ioredis retries by itself; an 'error' event without a listener would crash the process.
  publisher.on('error', (error: Error) => log.debug({ err: error }, 'revocation broadcast: publisher error'))
  subscriber.on('error', (error: Error) => log.debug({ err: error }, 'revocation broadcast: subscriber error'))
  const timers = new Set<NodeJS.Timeout>()
  const later = (ms: number, task: () => void) => {
    const timer = setTimeout(() => { timers.delete(timer); task() }, ms)
    timer.unref()
    timers.add(timer)
  }
  let closed = false

  const send = async (text: string): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      try {
        await (publisher as unknown as Publisher).revocationPublish(counter, channel, text, String(SEQUENCE_TTL_MS))
        return
      } catch (error) {
        // The revocation is in the store already; a retry reaches the others sooner than their resync would.
        if (closed) return
        if (attempt >= PUBLISH_ATTEMPTS) {
          log.warn({ err: error }, 'revocation broadcast: publish failed; the other instances resynchronise when they notice')
          return
        }
        await new Promise((resolve) => later(PUBLISH_RETRY_MS, () => resolve(undefined)))
      }
    }
  }

  return {
    publish(message) {
      const envelope: Envelope = { ...message, origin }
      return send(JSON.stringify(envelope))
    },
    subscribe(onMessage, onResync) {
      /** The highest sequence number received (or known to be covered by a resync); undefined until subscribed. */
      let seen: number | undefined
      let lost = false
      const readCounter = async () => Number(await publisher.get(counter) ?? 0)
      const resync = (why: string, upTo: number) => {
        seen = Math.max(seen ?? 0, upTo)
        log.warn(`revocation broadcast: ${why}; reloading revocations and dropping cached embedded tokens`)
        onResync()
      }

      subscriber.on('message', (from: string, text: string) => {
        if (from !== channel) return
        const space = text.indexOf(' ')
        const sequence = Number(text.slice(0, space))
        let envelope: Envelope
        try {
          envelope = JSON.parse(text.slice(space + 1)) as Envelope
        } catch {
          return
        }
        if (!Number.isSafeInteger(sequence)) return
        if (seen !== undefined && sequence > seen + 1) resync(`messages ${seen + 1}..${sequence - 1} were missed`, sequence)
        if (seen === undefined || sequence > seen) seen = sequence
        if (envelope.origin !== origin) onMessage(envelope)
      })
      subscriber.on('close', () => { lost = true })
      subscriber.on('ready', () => {
        if (!lost) return
        lost = false
        // Re-subscribed by ioredis; what was published meanwhile never arrives.
        readCounter().then((upTo) => resync('reconnected', upTo), () => resync('reconnected', seen ?? 0))
      })

      const check = async () => {
        if (seen === undefined) return
        const upTo = await readCounter()
        if (upTo < seen) {
          seen = upTo
          resync('the sequence counter went back (Redis lost data or was replaced)', upTo)
          return
        }
        if (upTo === seen) return
        await new Promise((resolve) => later(IN_FLIGHT_GRACE_MS, () => resolve(undefined)))
        if (seen < upTo) resync(`messages up to ${upTo} were missed`, upTo)
      }
      const tick = () => {
        if (closed) return
        check().catch(() => { /* Redis is away: 'ready' or the next tick notices */ }).finally(() => later(CHECK_INTERVAL_MS, tick))
      }

      subscriber.subscribe(channel)
        .then(async () => {
          // Subscribed first, counter read second: nothing published in between is missed.
          const upTo = await readCounter().catch(() => 0)
          seen = Math.max(seen ?? 0, upTo)
        })
        .catch((error: unknown) => log.error({ err: error }, 'revocation broadcast: subscribe failed'))
        .finally(() => later(CHECK_INTERVAL_MS, tick))
    },
    async close() {
      closed = true
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      await Promise.allSettled([publisher.quit(), subscriber.quit()])
      publisher.disconnect()
      subscriber.disconnect()
    },
  }
}
