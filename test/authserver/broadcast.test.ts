/**
 * The revocation channel between instances (src/authserver/broadcast.ts) on the Redis at REDIS_URL: what
 * one instance publishes reaches the others, and every way a message can go missing (a skipped sequence
 * number, the last message of a burst lost, a lost subscription, a counter that went back) makes the
 * instance resynchronise. Without REDIS_URL the suite is reported as skipped.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { pino } from 'pino'
import { describe, expect, it, onTestFinished } from 'vitest'
import { createRedisBroadcast, type Broadcast, type RevocationMessage } from '../../src/authserver/broadcast.js'
import { waitFor } from '../support/cli.js'
import { deleteKeys, killSubscribers } from '../support/redis.js'

const REDIS_URL = process.env.REDIS_URL
const log = pino({ level: 'silent' })

interface Listener {
  broadcast: Broadcast
  received: RevocationMessage[]
  resyncs: number
}

/** `count` instances on one channel of their own, subscribed and caught up with the counter. */
async function instances(count: number): Promise<{ channel: string; admin: Redis; all: Listener[] }> {
  const prefix = `{portcullis-test-${randomUUID()}}:`
  const channel = `${prefix}revocations`
  const admin = new Redis(REDIS_URL!)
  onTestFinished(async () => {
    admin.disconnect()
    await deleteKeys(REDIS_URL!, prefix)
  })
  const all = Array.from({ length: count }, () => {
    const listener: Listener = { broadcast: createRedisBroadcast(REDIS_URL!, channel, log), received: [], resyncs: 0 }
    listener.broadcast.subscribe((message) => listener.received.push(message), () => { listener.resyncs++ })
    onTestFinished(() => listener.broadcast.close())
    return listener
  })
  // Subscribed when the channel counts them all.
  await waitFor('every instance to subscribe', async () => {
    const [, subscribers] = await admin.pubsub('NUMSUB', channel) as [string, number]
    return subscribers === count
  }, 5000)
  return { channel, admin, all }
}

describe.skipIf(REDIS_URL === undefined)(`the revocation broadcast${REDIS_URL === undefined ? ' (REDIS_URL is not set)' : ''}`, () => {
  it('delivers a revocation to every other instance, in order, and not back to its sender; nothing is missed, so nobody resynchronises', async () => {
    const { all: [a, b, c] } = await instances(3)
    a!.broadcast.publish({ jti: { jti: 'j1', exp: 2_000_000_000 } })
    b!.broadcast.publish({ tokenHash: 'h1' })
    await waitFor('both messages to reach c', async () => c!.received.length === 2, 1000)
    expect(c!.received.map((message) => message.jti?.jti ?? message.tokenHash)).toEqual(['j1', 'h1'])
    expect(a!.received.map((message) => message.tokenHash)).toEqual(['h1'])
    expect(b!.received.map((message) => message.jti?.jti)).toEqual(['j1'])
    // Two check intervals pass without a false alarm.
    await new Promise((resolve) => setTimeout(resolve, 2500))
    expect([a!.resyncs, b!.resyncs, c!.resyncs]).toEqual([0, 0, 0])
  })

  it('a skipped sequence number makes the receiver resynchronise at once, and still applies the message', async () => {
    const { channel, admin, all: [a] } = await instances(1)
    // Two numbers taken, one message sent: number 1 never went out.
    await admin.incrby(`${channel}:seq`, 2)
    await admin.publish(channel, `2 ${JSON.stringify({ origin: 'elsewhere', tokenHash: 'h2' })}`)
    await waitFor('the gap to be noticed', async () => a!.resyncs === 1, 1000)
    expect(a!.received.map((message) => message.tokenHash)).toEqual(['h2'])
  })

  it('a lost last message (the counter ahead of what arrived) makes the instance resynchronise within two seconds, once', async () => {
    const { channel, admin, all: [a] } = await instances(1)
    await admin.incr(`${channel}:seq`)
    await waitFor('the missing message to be noticed', async () => a!.resyncs === 1, 2000)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    expect(a!.resyncs).toBe(1)
  })

  it('a counter that went back (Redis lost its data) makes the instance resynchronise, once', async () => {
    const { channel, admin, all: [a, b] } = await instances(2)
    a!.broadcast.publish({ tokenHash: 'h3' })
    await waitFor('the message to arrive', async () => b!.received.length === 1, 1000)
    await admin.del(`${channel}:seq`)
    await waitFor('the reset to be noticed', async () => b!.resyncs === 1 && a!.resyncs === 1, 2000)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    expect([a!.resyncs, b!.resyncs]).toEqual([1, 1])
    // Numbering starts again, and goes on being followed.
    b!.broadcast.publish({ tokenHash: 'h4' })
    await waitFor('the next message to arrive', async () => a!.received.length === 1, 1000)
    expect(a!.resyncs).toBe(1)
  })

  it('a lost subscription makes the instance resynchronise when it is back, and it receives again', async () => {
    const { channel, admin, all: [a, b] } = await instances(2)
    expect(await killSubscribers(admin, channel)).toBe(2)
    await waitFor('both to resynchronise', async () => a!.resyncs >= 1 && b!.resyncs >= 1, 5000)
    a!.broadcast.publish({ tokenHash: 'h5' })
    await waitFor('the message to arrive after the reconnect', async () => b!.received.length === 1, 2000)
  })

  it('the sequence counter carries a TTL, like every key of the store', async () => {
    const { channel, admin, all: [a] } = await instances(1)
    a!.broadcast.publish({ tokenHash: 'h6' })
    await waitFor('the counter to be written', async () => (await admin.exists(`${channel}:seq`)) === 1, 1000)
    expect(await admin.pttl(`${channel}:seq`)).toBeGreaterThan(24 * 3600 * 1000)
  })
})
