/**
 * Rate limits under `server.workers` with the memory store: the worker's side of ratelimit/shared.ts. The takes
 * of every request of one event-loop turn go to the primary in one message, and come back in one: a turn's worth
 * of requests costs one IPC round trip, not one each. No answer within {@link RATE_TIMEOUT_MS} (the primary gone
 * or stuck) is a store failure: the policy's `rate_limits.*.on_store_failure` decides, as for Redis.
 */
import { setImmediate, setTimeout } from 'node:timers'
import type { GcraOutcome } from '../ratelimit/gcra.js'
import type { SharedBuckets, SharedTake } from '../ratelimit/shared.js'
import { isClusterMessage, toPrimary, type ClusterMessage, type RateOutcome, type RateTake } from './cluster-messages.js'

const RATE_TIMEOUT_MS = 1000

interface Pending { resolve(outcomes: GcraOutcome[]): void; reject(error: Error): void }

export function ipcRates(): SharedBuckets {
  let next = 0
  const waiting = new Map<number, Pending>()
  let batch: Array<{ id: number; takes: RateTake[] }> = []
  const fail = (ids: readonly number[], error: Error) => {
    for (const id of ids) {
      const pending = waiting.get(id)
      if (pending === undefined) continue
      waiting.delete(id)
      pending.reject(error)
    }
  }
  // One timer a message, not a request: whatever of it is still unanswered then has failed.
  const flush = () => {
    const sent = batch
    batch = []
    const ids = sent.map((request) => request.id)
    if (!toPrimary({ portcullis: 'rate?', batch: sent })) return fail(ids, new Error('no primary'))
    setTimeout(() => fail(ids, new Error('the primary did not answer')), RATE_TIMEOUT_MS).unref()
  }
  process.on('message', (message: unknown) => {
    if (!isClusterMessage(message) || message.portcullis !== 'rate') return
    for (const { id, outcomes } of message.batch) {
      const pending = waiting.get(id)
      if (pending === undefined) continue
      waiting.delete(id)
      pending.resolve(outcomes.map(fromWire))
    }
  })
  return {
    takeAll: (takes) => new Promise((resolve, reject) => {
      const id = ++next
      waiting.set(id, { resolve, reject })
      if (batch.length === 0) setImmediate(flush)
      batch.push({ id, takes: takes.map(toWire) })
    }),
  }
}

const toWire = (take: SharedTake): RateTake => [take.bucket, take.key, take.parameters.emissionMs, take.parameters.toleranceMs, take.maxKeys]

const fromWire = ([allowed, remaining, retryAfterMs, resetMs]: RateOutcome): GcraOutcome => ({ allowed: allowed === 1, tat: 0, remaining, retryAfterMs, resetMs })

/** The primary's answer to one `rate?` message. */
export function answerRates(host: { takeAll(takes: readonly SharedTake[]): GcraOutcome[] }, message: Extract<ClusterMessage, { portcullis: 'rate?' }>): ClusterMessage {
  return {
    portcullis: 'rate',
    batch: message.batch.map(({ id, takes }) => ({
      id,
      outcomes: host.takeAll(takes.map(([bucket, key, emissionMs, toleranceMs, maxKeys]) => ({ bucket, key, parameters: { emissionMs, toleranceMs }, maxKeys })))
        .map((outcome): RateOutcome => [outcome.allowed ? 1 : 0, outcome.remaining, outcome.retryAfterMs, outcome.resetMs]),
    })),
  }
}
