/** RFC 6749 §3.3 scope parameters: syntax, and what may be granted. */
import { InvalidScope } from '../errors/oauth-errors.js'

const SCOPE = /^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/

/** The scope-tokens of a `scope` parameter; invalid_scope when its syntax is wrong (RFC 6749 §3.3). */
export function parseScope(value: string): string[] {
  if (!SCOPE.test(value)) throw new InvalidScope('malformed scope parameter')
  return [...new Set(value.split(' '))]
}

/**
 * The scope to grant: the request's, which must lie within `allowed`, or `defaults` (all of `allowed` unless
 * given) when the request names none (RFC 6749 §3.3 lets the server choose a default; §6 for a refresh).
 */
export function grantScope(requested: string | undefined, allowed: Iterable<string>, defaults?: Iterable<string>): string[] {
  const permitted = new Set(allowed)
  if (requested === undefined) return defaults === undefined ? [...permitted] : [...defaults].filter((scope) => permitted.has(scope))
  const scopes = parseScope(requested)
  const refused = scopes.filter((scope) => !permitted.has(scope))
  if (refused.length > 0) throw new InvalidScope(`not permitted: ${refused.join(' ')}`)
  return scopes
}
