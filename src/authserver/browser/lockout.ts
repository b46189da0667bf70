/**
 * The pages' side of brute-force throttling (RFC 6749 §4.3.2, RFC 8628 §5.1): a locked key gets the page again with
 * 429, `Retry-After`, and a sentence that says how long to wait, instead of the JSON error of /token.
 */
import type { FastifyReply } from 'fastify'
import { TooManyAttempts } from '../../errors/oauth-errors.js'
import type { Attempt, Throttle } from '../context.js'

/**
 * One attempt of `keys`, counted before the page evaluates it (so parallel guesses see each other), when they may try again: the caller
 * keeps it on a failure and releases it on a success. Otherwise the lockout sentence (`Too many <what>. Try
 * again in …`), with Retry-After set.
 */
export async function reserveAttempt(throttle: Throttle, keys: readonly string[], reply: FastifyReply, what: string): Promise<Attempt | string> {
  try {
    return await throttle.reserve(keys)
  } catch (error) {
    if (!(error instanceof TooManyAttempts)) throw error
    reply.log.warn({ reason: error.internal.detail }, `page throttled: too many ${what}`)
    reply.header('retry-after', String(error.retryAfterSeconds))
    const minutes = Math.ceil(error.retryAfterSeconds / 60)
    return `Too many ${what}. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`
  }
}
