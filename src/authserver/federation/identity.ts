/**
 * From what an identity provider vouched for (its ID token's claims, its userinfo, GitHub's user API) to one of
 * our users: the subject (issuer-scoped unless `subject.scope: global`), our claims (`claims`, our name → their
 * path), and whether this person may sign in at all (`allow`). Every check fails closed: a claim that is
 * missing, of the wrong type, or too large refuses the sign-in rather than letting a partial identity through.
 */
import { readClaim } from '../../claims/path.js'
import type { User } from '../users.js'
import type { IdentityProviderSettings } from './settings.js'

/** The same bound as `users[].sub` (and an identity header's value): printable ASCII, 255 at most. */
const SUBJECT = /^[\x21-\x7e]{1,255}$/
/** Our claims of one user, as JSON: ample for names, mail and a few hundred groups; a token must stay a header. */
const MAX_CLAIMS_BYTES = 16 * 1024

export type MappedIdentity =
  | { readonly ok: true; readonly user: User }
  | { readonly ok: false; readonly reason: string }

function refused(reason: string): MappedIdentity {
  return { ok: false, reason }
}

function subjectOf(provider: IdentityProviderSettings, claims: Readonly<Record<string, unknown>>): string | undefined {
  const parts: string[] = []
  for (const path of provider.subject) {
    const value = readClaim(claims, path)
    if (typeof value === 'number' && Number.isSafeInteger(value)) parts.push(String(value))
    else if (typeof value === 'string' && value !== '') parts.push(value)
    else return undefined
  }
  return parts.join(':')
}

/** A JSON value copied out of the upstream claims (no prototype tricks: readClaim walks own properties only). */
function isJsonValue(value: unknown): boolean {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value) || typeof value === 'object'
}

function stringList(value: unknown): string[] | undefined {
  if (typeof value === 'string') return [value]
  if (Array.isArray(value) && value.every((item) => typeof item === 'string')) return value as string[]
  return undefined
}

/** Why `allow` refuses this person, or undefined when every rule given holds (the rules are ANDed, each list ORed). */
function unmetAllowRule(provider: IdentityProviderSettings, upstream: Readonly<Record<string, unknown>>,
  ours: Readonly<Record<string, unknown>>): string | undefined {
  const { emailDomains, groups, tenants } = provider.allow
  if (emailDomains) {
    const email = ours.email
    if (typeof email !== 'string' || !email.includes('@')) return 'no e-mail address to check allow.email_domains against'
    // An address the provider has not verified proves nothing about its domain (OIDC Core §5.1 email_verified).
    if (ours.email_verified !== true && upstream.email_verified !== true) return 'the e-mail address is not verified by the provider'
    const domain = email.slice(email.lastIndexOf('@') + 1).toLowerCase()
    if (!emailDomains.includes(domain)) return `the e-mail domain ${domain.slice(0, 100)} is not in allow.email_domains`
  }
  if (groups) {
    // Entra's group overage: more groups than fit the token, named by a link instead; too many to judge.
    const overage = upstream._claim_names
    if (typeof overage === 'object' && overage !== null && Object.hasOwn(overage, 'groups')) return 'the provider sent a link instead of the groups (group overage)'
    const held = stringList(ours.groups)
    if (!held) return 'no groups to check allow.groups against'
    if (!held.some((group) => groups.includes(group))) return 'none of the user\'s groups is in allow.groups'
  }
  if (tenants) {
    const tid = upstream.tid
    if (typeof tid !== 'string' || !tenants.includes(tid)) return `the tenant ${typeof tid === 'string' ? tid.slice(0, 64) : '(none)'} is not in allow.tenants`
  }
  return undefined
}

/** Our user for what the provider said, or why this person may not sign in. */
export function mapIdentity(provider: IdentityProviderSettings, upstream: Readonly<Record<string, unknown>>): MappedIdentity {
  const subject = subjectOf(provider, upstream)
  if (subject === undefined) return refused(`the provider did not send ${provider.subject.map((path) => path.text).join(' and ')} as a string`)
  const sub = provider.subjectScope === 'provider' ? `${provider.id}:${subject}` : subject
  if (!SUBJECT.test(sub)) return refused('the subject is not 1-255 printable ASCII characters')
  const claims: Record<string, unknown> = {}
  for (const [name, path] of provider.claims) {
    const value = readClaim(upstream, path)
    if (value !== undefined && isJsonValue(value)) claims[name] = value
  }
  if (Buffer.byteLength(JSON.stringify(claims)) > MAX_CLAIMS_BYTES) return refused(`the mapped claims exceed ${MAX_CLAIMS_BYTES} bytes`)
  const unmet = unmetAllowRule(provider, upstream, claims)
  if (unmet !== undefined) return refused(unmet)
  const name = [claims.preferred_username, claims.email].find((value): value is string => typeof value === 'string' && value !== '')
  return { ok: true, user: { username: name ?? subject, sub, claims, provider: provider.id } }
}
