/**
 * Claim paths, conditions and claim headers: how `issuers[]`, `routes[]` and `routes[].mcp` name the claims of
 * a token and what they must hold (src/claims/).
 */
import { Type } from '@sinclair/typebox'
import { HeaderName, Strict } from './shared.js'

/** A claim path (claims/path.ts): `tenant`, `realm_access.roles`, `["https://example.com/roles"]`; parsed by lint. */
export const ClaimPathText = Type.String({ minLength: 1, maxLength: 256, 'x-message': 'must be a claim path of at most 256 characters' })
const ClaimScalar = Type.Union([Type.String(), Type.Number(), Type.Boolean()])
const ClaimOperand = Type.Union([
  ClaimScalar,
  Strict({ param: Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$', 'x-message': 'must be a path parameter name' }) }),
  Strict({ header: HeaderName }),
], { 'x-message': 'must be a string, number or boolean, { param: name } or { header: Name }' })
const ClaimCondition = Strict({
  claim: ClaimPathText,
  equals: Type.Optional(ClaimOperand),
  contains: Type.Optional(ClaimOperand),
  one_of: Type.Optional(Type.Array(ClaimScalar, { minItems: 1 })),
  present: Type.Optional(Type.Literal(true, { 'x-message': 'must be true (a claim that must be absent is not a condition)' })),
})
export const ClaimConditions = Strict({
  all: Type.Optional(Type.Array(ClaimCondition)),
  any: Type.Optional(Type.Array(ClaimCondition, { minItems: 1 })),
})
/** Header name → claim path; names checked against the reserved ones by lint. */
export const ClaimHeaders = Type.Record(Type.String(), ClaimPathText)
export const OneOrMorePaths = Type.Union([ClaimPathText, Type.Array(ClaimPathText, { minItems: 1 })],
  { 'x-message': 'must be a claim path or a list of claim paths' })
