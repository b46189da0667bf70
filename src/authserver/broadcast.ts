/**
 * Revocation broadcast between instances sharing one Redis (issue 7 item 3): every revocation an
 * instance makes is published on a channel; every other instance applies it to its deny-list and its
 * gateway caches as it arrives (well within a second). An instance that lost its subscription may have
 * missed messages: when the subscription comes back it reloads the deny-list from the store and drops its
 * cached embedded-issuer tokens, so it never keeps serving a token revoked while it was away.
 */
import { randomUUID } from 'node:crypto'
import { connectRedis } from './storage/redis-connection.js'
import type { FastifyBaseLogger } from 'fastify'

/** What travels on the channel: a JWT's jti with its exp (seconds), or an opaque token's hash. */
export interface RevocationMessage {
  readonly jti?: { readonly jti: string; readonly exp: number }
  readonly tokenHash?: string
}

export interface Broadcast {
  publish(message: RevocationMessage): void
  /** `onMessage` for every other instance's revocation; `onResync` after the subscription was lost and is back. */
  subscribe(onMessage: (message: RevocationMessage) => void, onResync: () => void): void
  close(): Promise<void>
}

interface Envelope extends RevocationMessage { readonly origin: string }

export function createRedisBroadcast(url: string, channel: string, log: FastifyBaseLogger): Broadcast {
  const origin = randomUUID()
  const options = { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 1000 }
  const publisher = connectRedis(url, options)
  // A subscribed connection can do nothing else: its own client.
  const subscriber = connectRedis(url, { enableOfflineQueue: true })
  // ioredis retries by itself; an 'error' event without a listener would crash the process.
  publisher.on('error', (error: Error) => log.debug({ err: error }, 'revocation broadcast: publisher error'))
  subscriber.on('error', (error: Error) => log.debug({ err: error }, 'revocation broadcast: subscriber error'))
  let lost = false
  subscriber.on('close', () => { lost = true })
  return {
    publish(message) {
      const envelope: Envelope = { ...message, origin }
      publisher.publish(channel, JSON.stringify(envelope)).catch((error: unknown) => {
        // The revocation is in the store already; the others resynchronise when they see the outage.
        log.warn({ err: error }, 'revocation broadcast: publish failed')
      })
    },
    subscribe(onMessage, onResync) {
      subscriber.on('message', (from: string, text: string) => {
        if (from !== channel) return
        let envelope: Envelope
        try {
          envelope = JSON.parse(text) as Envelope
        } catch {
          return
        }
        if (envelope.origin !== origin) onMessage(envelope)
      })
      subscriber.on('ready', () => {
        if (!lost) return
        lost = false
        log.warn('revocation broadcast: reconnected; reloading revocations and dropping cached embedded tokens')
        onResync()
      })
      subscriber.subscribe(channel).catch((error: unknown) => log.error({ err: error }, 'revocation broadcast: subscribe failed'))
    },
    async close() {
      await Promise.allSettled([publisher.quit(), subscriber.quit()])
      publisher.disconnect()
      subscriber.disconnect()
    },
  }
}
