/**
 * Device authorization state (RFC 8628): user codes, and what the store keeps of a
 * device_code. That is three rows, each with a single writer, so no write can undo another:
 * - `<hash>`           the request (client, scope, user code, expiry), written once. Consumed when the
 *                      user decides: that is what makes a user code work only once.
 * - `<hash>:decision`  approved (with sub and auth_time) or denied, written once, by that decision.
 *                      Consumed when the device redeems it: the device_code is single-use.
 * - `<hash>:poll`      the interval and the last poll (RFC 8628 §3.5), rewritten by every poll; once redeemed, the grantId.
 * One row would not do: upsert replaces a whole row and clears its consumed mark, so a poll racing the
 * approval could erase it, and a poll racing the redemption could make the code redeemable again.
 * `<hash>` is the SHA-256 of the device_code (base64url, so it never contains `:`).
 */
import { randomBytes } from 'node:crypto'
import { tokenHash } from '../authn/token-cache.js'
import { ServerError } from '../errors/oauth-errors.js'
import type { AuthServerContext } from './context.js'
import { randomToken } from './random.js'

/** RFC 8628 §6.1: base-20, no vowels (no words) and no easily confused characters. */
export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ'
/** RFC 8628 §3.2 `expires_in`: 600 s, as node-oidc-provider and Keycloak. */
export const DEVICE_CODE_TTL_SECONDS = 600
/** RFC 8628 §3.2 `interval`: the one a device starts with; RFC 8628 §3.5 adds 5 s per slow_down, for good. */
export const POLL_INTERVAL_SECONDS = 5
export const SLOW_DOWN_STEP_SECONDS = 5
import { DEVICE_CODE_PREFIX } from '../common/token-formats.js'
export { DEVICE_CODE_PREFIX }
/** Rows outlive the code by this much, so a late poll hears expired_token (RFC 8628 §3.5), not invalid_grant. */
const EXPIRED_KEPT_SECONDS = 600

export type DeviceCodeStatus = 'pending' | 'approved' | 'denied'

/** A device_code as the grant sees it, assembled from its three rows. */
export interface DeviceCodeRecord {
  /** The store id: SHA-256 of the device_code. */
  readonly id: string
  readonly clientId: string
  readonly scope: readonly string[]
  /** RFC 8707: the resources the device asked for (the grant's); absent when it named none. */
  readonly resource?: readonly string[]
  /** As shown, `XXXX-XXXX`. */
  readonly userCode: string
  readonly status: DeviceCodeStatus
  /** Set once approved. */
  readonly sub?: string
  /** Seconds since the epoch; the user's login, once approved. */
  readonly authTime?: number
  /** The minimum seconds between polls, grown by every slow_down. */
  readonly interval: number
  /** Milliseconds since the epoch. */
  readonly lastPollAt?: number
  /** Seconds since the epoch. */
  readonly expiresAt: number
  /** Tokens were issued for it already. */
  readonly redeemed: boolean
  readonly grantId?: string
}

interface StoredRequest {
  id: string; clientId: string; scope: string[]; resource?: string[]; userCode: string; expiresAt: number; interval: number
}
interface StoredDecision { status: 'approved' | 'denied'; sub?: string; authTime?: number }
interface StoredPoll { interval: number; lastPollAt?: number; grantId?: string }

const decisionId = (id: string) => `${id}:decision`
const pollId = (id: string) => `${id}:poll`

/** Seconds the rows of a code have left in the store (they all end together). */
function remainingSeconds(ctx: AuthServerContext, expiresAt: number): number {
  return Math.max(1, Math.ceil(expiresAt + EXPIRED_KEPT_SECONDS - ctx.now() / 1000))
}

/** 8 characters from the CSPRNG, without modulo bias: bytes ≥ 240 (12 × 20) are drawn again (RFC 8628 §6.1). */
export function generateUserCode(): string {
  let code = ''
  while (code.length < 8) {
    for (const byte of randomBytes(16)) {
      if (byte < 240 && code.length < 8) code += USER_CODE_ALPHABET[byte % 20]
    }
  }
  return `${code.slice(0, 4)}-${code.slice(4)}`
}

/**
 * What the user typed, as issued (`XXXX-XXXX`), or undefined when it cannot be a user code (RFC 8628 §6.1):
 * case-insensitive, whitespace, dashes and other punctuation ignored.
 */
export function normalizeUserCode(input: string): string | undefined {
  if (input.length > 64) return undefined
  const letters = input.replace(/[\s\p{P}\p{S}]/gu, '')
  // No `u` flag: case folding stays within ASCII, so `ſ` or the Kelvin sign never pass for S or K.
  if (!/^[BCDFGHJKLMNPQRSTVWXZ]{8}$/i.test(letters)) return undefined
  const upper = letters.toUpperCase()
  return `${upper.slice(0, 4)}-${upper.slice(4)}`
}

/**
 * A new device_code and user code for the client (RFC 8628 §3.2), for `scope` and the RFC 8707 `resource`s named
 * (already checked); only the device_code's hash is stored.
 */
export async function createDeviceCode(ctx: AuthServerContext, clientId: string, scope: readonly string[],
  resource?: readonly string[]): Promise<{ deviceCode: string; userCode: string; expiresIn: number; interval: number }> {
  // Unique among unexpired codes. 20^8 makes a clash rare; a few draws make it vanishing.
  let userCode: string | undefined
  for (let attempt = 0; attempt < 5 && userCode === undefined; attempt++) {
    const candidate = generateUserCode()
    if (!(await ctx.store.findByUserCode(candidate))) userCode = candidate
  }
  if (userCode === undefined) throw new ServerError(new Error('no free user code after 5 draws'))
  const deviceCode = randomToken(DEVICE_CODE_PREFIX)
  const id = tokenHash(deviceCode)
  const expiresAt = Math.floor(ctx.now() / 1000) + DEVICE_CODE_TTL_SECONDS
  const request: StoredRequest = {
    id, clientId, scope: [...scope], ...(resource !== undefined && { resource: [...resource] }), userCode, expiresAt,
    interval: POLL_INTERVAL_SECONDS,
  }
  await ctx.store.upsert('device_code', id, { ...request }, remainingSeconds(ctx, expiresAt))
  return { deviceCode, userCode, expiresIn: DEVICE_CODE_TTL_SECONDS, interval: POLL_INTERVAL_SECONDS }
}

/** The device_code's state, or undefined when it is unknown (or long gone). */
export async function findDeviceCode(ctx: AuthServerContext, deviceCode: string): Promise<DeviceCodeRecord | undefined> {
  const id = tokenHash(deviceCode)
  const [request, decision, poll] = await Promise.all([
    ctx.store.find('device_code', id), ctx.store.find('device_code', decisionId(id)), ctx.store.find('device_code', pollId(id)),
  ]) as [StoredRequest | undefined, (StoredDecision & { consumedAt?: number }) | undefined, StoredPoll | undefined]
  if (!request) return undefined
  return {
    id,
    clientId: request.clientId,
    scope: request.scope,
    ...(request.resource !== undefined && { resource: request.resource }),
    userCode: request.userCode,
    status: decision?.status ?? 'pending',
    ...(decision?.sub !== undefined && { sub: decision.sub }),
    ...(decision?.authTime !== undefined && { authTime: decision.authTime }),
    interval: poll?.interval ?? request.interval,
    ...(poll?.lastPollAt !== undefined && { lastPollAt: poll.lastPollAt }),
    expiresAt: request.expiresAt,
    redeemed: decision?.consumedAt !== undefined,
    ...(poll?.grantId !== undefined && { grantId: poll.grantId }),
  }
}

/** Persists a poll of a pending code: when it came, and the interval from now on (RFC 8628 §3.5: slow_down). */
export async function recordPoll(ctx: AuthServerContext, record: DeviceCodeRecord, interval: number, at: number): Promise<void> {
  const poll: StoredPoll = { interval, lastPollAt: at }
  await ctx.store.upsert('device_code', pollId(record.id), { ...poll }, remainingSeconds(ctx, record.expiresAt))
}

/** Marks an approved code redeemed, atomically: true for the first caller only: the device_code is single-use. */
export function redeemDeviceCode(ctx: AuthServerContext, record: DeviceCodeRecord): Promise<boolean> {
  return ctx.store.consume('device_code', decisionId(record.id))
}

/** Remembers the grant issued for a redeemed code, so that a replay can revoke it. */
export async function linkGrant(ctx: AuthServerContext, record: DeviceCodeRecord, grantId: string): Promise<void> {
  const poll: StoredPoll = { interval: record.interval, grantId }
  await ctx.store.upsert('device_code', pollId(record.id), { ...poll }, remainingSeconds(ctx, record.expiresAt))
}

/** The request behind a user code the page may still act on: known, unexpired and not yet decided. */
async function openRequest(ctx: AuthServerContext, input: string): Promise<StoredRequest | undefined> {
  const userCode = normalizeUserCode(input)
  if (userCode === undefined) return undefined
  const found = await ctx.store.findByUserCode(userCode) as (StoredRequest & { consumedAt?: number }) | undefined
  if (!found || found.consumedAt !== undefined || found.expiresAt * 1000 <= ctx.now()) return undefined
  return found
}

/**
 * For the /device consent page: the client, scope and resources behind a user code, or undefined when it
 * cannot be used (unknown, expired or already decided).
 */
export async function findUserCode(ctx: AuthServerContext, input: string):
  Promise<{ userCode: string; clientId: string; scope: readonly string[]; resource?: readonly string[] } | undefined> {
  const request = await openRequest(ctx, input)
  return request && {
    userCode: request.userCode, clientId: request.clientId, scope: request.scope,
    ...(request.resource !== undefined && { resource: request.resource }),
  }
}

async function decide(ctx: AuthServerContext, input: string, decision: StoredDecision): Promise<boolean> {
  const request = await openRequest(ctx, input)
  // Of two decisions on one code (two tabs, approve and deny), the atomic consume lets one through.
  if (!request || !(await ctx.store.consume('device_code', request.id))) return false
  await ctx.store.upsert('device_code', decisionId(request.id), { ...decision }, remainingSeconds(ctx, request.expiresAt))
  return true
}

/**
 * The user approved the request behind `userCode` (any spelling normalizeUserCode accepts); the device's next poll
 * gets tokens for `sub`. False when the code is unknown, expired or already used.
 */
export function approveDeviceCode(ctx: AuthServerContext, userCode: string, user: { sub: string; authTime: number }): Promise<boolean> {
  return decide(ctx, userCode, { status: 'approved', sub: user.sub, authTime: user.authTime })
}

/** The user denied it: the device's next poll gets access_denied. False as for approveDeviceCode. */
export function denyDeviceCode(ctx: AuthServerContext, userCode: string): Promise<boolean> {
  return decide(ctx, userCode, { status: 'denied' })
}
