/**
 * The pages' side of brute-force throttling (CA-09, PW-04, DV-04): a locked key gets the page again with
 * 429, `Retry-After`, and a sentence that says how long to wait, instead of the JSON error of /token.
 */
import type { FastifyReply } from 'fastify'
import { TooManyAttempts } from '../../errors/oauth-errors.js'
import type { Throttle } from '../context.js'

/** Undefined when `keys` may try again; otherwise the lockout sentence (`Too many <what>. Try again in …`). */
export async function lockout(throttle: Throttle, keys: readonly string[], reply: FastifyReply, what: string): Promise<string | undefined> {
  try {
    await throttle.check(keys)
    return undefined
  } catch (error) {
    if (!(error instanceof TooManyAttempts)) throw error
    reply.log.warn({ reason: error.internal.detail }, `page throttled: too many ${what}`)
    reply.header('retry-after', String(error.retryAfterSeconds))
    const minutes = Math.ceil(error.retryAfterSeconds / 60)
    return `Too many ${what}. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`
  }
}
