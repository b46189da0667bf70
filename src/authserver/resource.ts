/**
 * RFC 8707 resource indicators (and RFC 9068 §3 `aud`): the `resource` parameters a request names, and the
 * `aud` a token gets from them. /authorize and /device_authorization name the resources a grant is for,
 * /token those of one access token. Each value must be one of the identifiers clients may ask for
 * (`access_token.audience` and the gateway's `resources[].resource`), compared as exact strings, as
 * redirect URIs are (RFC 9700 §4.1.3), save one thing: scheme and host may differ in ASCII case (MCP
 * 2026-07-28 "Canonical Server URI" asks servers to accept `HTTPS://API.example.com`; RFC 3986 §6.2.2.1 says
 * they are case-insensitive). No other normalisation: path, query, port and trailing slash stay exact, and
 * what is granted is always the configured spelling. A grant keeps the resources it was authorized for, and
 * a token request may narrow them, never widen them (RFC 8707 §2.2).
 */
import { InvalidTarget } from '../errors/oauth-errors.js'
import type { AuthServerSettings } from './settings.js'

/** RFC 3986 §4.3 absolute-URI: a scheme, then ':'. Only says why a value was refused (the log's detail). */
const ABSOLUTE_URI = /^[A-Za-z][A-Za-z0-9+.-]*:/

/**
 * scheme://host[:port][path][?query], printable ASCII only, the host a DNS name or an IPv6 literal. Deliberately
 * not the WHATWG URL parser: it would also turn `%2e`, full-width letters, tabs and a default port into the
 * configured spelling, and only case may differ. No `@` can come before the path, so no user information.
 */
const FOLDABLE = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]))(:[0-9]+)?([/?][\x21-\x7e]*)?$/

/** Only A-Z: `toLowerCase()` would also turn the Kelvin sign (U+212A) into an ASCII k. */
const asciiLower = (text: string) => text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase())

/** The value with scheme and host in lowercase, or undefined when it is not strictly such a URI. */
function foldedCase(value: string): string | undefined {
  const match = FOLDABLE.exec(value)
  return match ? `${asciiLower(match[1]!)}${match[2] ?? ''}${match[3] ?? ''}` : undefined
}

/** The configured identifier a value names: itself, else the one that differs only in the case of scheme and host. */
function configuredSpelling(value: string, allowed: readonly string[]): string | undefined {
  if (allowed.includes(value)) return value
  const folded = foldedCase(value)
  return folded === undefined ? undefined : allowed.find((identifier) => foldedCase(identifier) === folded)
}

/** A value as the log shows it: quoted, and never long. */
const shown = (value: unknown) => JSON.stringify(String(value).slice(0, 100))

/** Every `resource` value of a parsed form body, repeated or not; empty ones count as omitted (RFC 6749 §3.1). */
export function resourceParameters(body: unknown): unknown[] {
  const raw = (body as Record<string, unknown> | null | undefined)?.resource
  return (Array.isArray(raw) ? raw : raw === undefined ? [] : [raw]).filter((value) => value !== '')
}

/**
 * The distinct resources a request names, as configured, or undefined when it names none. invalid_target for
 * any value that is not one of `allowed` (exactly, or but for the case of scheme and host), and for a fragment
 * whatever is configured (RFC 8707 §2: "MUST NOT include a fragment component"). A configured
 * `access_token.audience` that is not a URI (`orders-api`) can still be named: it predates resource
 * indicators, and exact equality is all that is compared.
 */
export function requestedResources(values: readonly unknown[], allowed: readonly string[]): string[] | undefined {
  if (values.length === 0) return undefined
  const resources = new Set<string>()
  for (const value of new Set(values)) {
    if (typeof value !== 'string') throw new InvalidTarget('resource is not a string')
    if (value.includes('#')) throw new InvalidTarget(`resource ${shown(value)} has a fragment`)
    const configured = configuredSpelling(value, allowed)
    if (configured === undefined) {
      throw new InvalidTarget(ABSOLUTE_URI.test(value) ? `unknown resource ${shown(value)}` : `resource ${shown(value)} is not an absolute URI`)
    }
    resources.add(configured)
  }
  return [...resources]
}

/**
 * The `aud` of an access token of a grant authorized for `granted` (undefined: the configured
 * `access_token.audience`, as it is now): the token request's resources, which must lie within the
 * grant's (RFC 8707 §2.2: "a subset of the set of resources originally granted"), or else all of the
 * grant's. A resource the configuration no longer lists drops out; a grant left with none gets nothing.
 */
export function audienceWithin(settings: AuthServerSettings, granted: readonly string[] | undefined,
  requested: readonly string[] | undefined): readonly string[] {
  const current = (granted ?? settings.audience).filter((resource) => settings.resourceIndicators.includes(resource))
  if (requested === undefined) {
    if (current.length === 0) throw new InvalidTarget('none of the resources the grant was authorized for is configured any longer')
    return current
  }
  const outside = requested.filter((resource) => !current.includes(resource))
  if (outside.length > 0) throw new InvalidTarget(`not among the resources the grant was authorized for: ${outside.map(shown).join(' ')}`)
  return requested
}
