/**
 * Rate limits under `server.workers` with the memory store: the worker's side of ratelimit/shared.ts. The takes
 * of every request of one event-loop turn go to the primary in one message, and come back in one: a turn's worth
 * of requests costs one IPC round trip, not one each. No answer within {@link RATE_TIMEOUT_MS} (the primary gone
 * or stuck) is a store failure: the policy's `rate_limits.*.on_store_failure` decides, as for Redis.
 */
import { setImmediate } from 'node:timers'
import type { GcraOutcome } from '../ratelimit/gcra.js'
import type { SharedBuckets, SharedTake } from '../ratelimit/shared.js'
import { isClusterMessage, toPrimary, type ClusterMessage, type RateOutcome, type RateTake } from './cluster-messages.js'

const RATE_TIMEOUT_MS = 1000

interface Pending { resolve(outcomes: GcraOutcome[]): void; reject(error: Error): void; timer: NodeJS.Timeout }

export function ipcRates(): SharedBuckets {
  let next = 0
  const waiting = new Map<number, Pending>()
  let batch: Array<{ id: number; takes: RateTake[] }> = []
  const flush = () => {
    const sent = batch
    batch = []
    if (toPrimary({ portcullis: 'rate?', batch: sent })) return
    for (const { id } of sent) fail(id, new Error('no primary'))
  }
  const fail = (id: number, error: Error) => {
    const pending = waiting.get(id)
    if (pending === undefined) return
    waiting.delete(id)
    clearTimeout(pending.timer)
    pending.reject(error)
  }
  process.on('message', (message: unknown) => {
    if (!isClusterMessage(message) || message.portcullis !== 'rate') return
    for (const { id, outcomes } of message.batch) {
      const pending = waiting.get(id)
      if (pending === undefined) continue
      waiting.delete(id)
      clearTimeout(pending.timer)
      pending.resolve(outcomes.map(fromWire))
    }
  })
  return {
    takeAll: (takes) => new Promise((resolve, reject) => {
      const id = ++next
      const timer = setTimeout(() => fail(id, new Error('the primary did not answer')), RATE_TIMEOUT_MS)
      waiting.set(id, { resolve, reject, timer })
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
