/**
 * What every section of the config schema builds on: strict objects, clean enums, and the string formats
 * (durations, sizes, host:port, header names, scope-tokens) several sections share.
 */
import { Type, type Static } from '@sinclair/typebox'

/** A string enum that Ajv reports as one clean `enum` error (a union of literals would report noise). */
export function StringEnum<const T extends readonly string[]>(values: T, message?: string) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...(message ? { 'x-message': message } : {}) })
}

export function Strict<T extends Parameters<typeof Type.Object>[0]>(properties: T) {
  return Type.Object(properties, { additionalProperties: false })
}

export function ScopeTokenPattern() {
  return Type.String({ pattern: '^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$', 'x-message': 'must be a scope-token (RFC 6749 §3.3: printable ASCII, no space, " or \\)' })
}

export const Duration = Type.String({
  pattern: '^[0-9]+(ms|s|m|h|d)$',
  'x-message': 'must be a duration such as 30s, 5m or 1h',
})
export const Size = Type.String({
  pattern: '^[0-9]+(b|kb|mb|gb)$',
  'x-message': 'must be a size such as 512kb, 10mb or 1gb',
})
export const HostPort = Type.String({
  pattern: '^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):[0-9]{1,5}$',
  'x-message': 'must be host:port, such as 127.0.0.1:8080 or [::1]:8080',
})
export const NonEmpty = Type.String({ minLength: 1 })
export const HeaderName = Type.String({
  pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
  'x-message': 'must be an HTTP header name',
})

/**
 * `routes[].dpop` and `issuers[].dpop`: whether a route (or an issuer's tokens) takes DPoP-bound tokens with
 * proofs (RFC 9449; src/dpop/).
 */
export const DpopMode = StringEnum(['required', 'allowed', 'off'] as const)
export type DpopModeConfig = Static<typeof DpopMode>
