import { describe, expect, it } from 'vitest'
import type { Principal } from '../common/principal.js'
import type { CompiledRule } from '../rules/compile.js'
import { InsufficientScope } from '../errors/oauth-errors.js'
import { requireScopes } from './scopes.js'

function principal(scopes: string[]): Principal {
  return { issuer: 'https://issuer.example/', subject: 'user-1', clientId: 'client-1', scopes, expiresAt: undefined, jti: undefined }
}

/** requireScopes reads only the scope fields of a rule (no `scope_implies` here: test/authz/scope-implies.test.ts). */
function rule(scopesAll: string[], scopesAny: string[] | null = null): CompiledRule {
  return { scopesAll, scopesAny, impliedBy: null } as Partial<CompiledRule> as CompiledRule
}

function failure(granted: string[], required: CompiledRule): InsufficientScope {
  try {
    requireScopes(principal(granted), required)
  } catch (error) {
    expect(error).toBeInstanceOf(InsufficientScope)
    return error as InsufficientScope
  }
  throw new Error('requireScopes did not throw')
}

describe('requireScopes', () => {
  it('passes a rule without scopes whatever the token carries', () => {
    expect(() => requireScopes(principal([]), rule([]))).not.toThrow()
  })

  it('passes when every scope of `all` is granted, in any order', () => {
    expect(() => requireScopes(principal(['b', 'x', 'a']), rule(['a', 'b']))).not.toThrow()
  })

  it('throws 403 insufficient_scope naming every scope of `all` when one is missing; the detail names the missing one', () => {
    const error = failure(['a'], rule(['a', 'b', 'c']))
    expect(error.status).toBe(403)
    expect(error.code).toBe('insufficient_scope')
    expect(error.required).toEqual(['a', 'b', 'c'])
    expect(error.internal.detail).toBe('missing b c')
    expect(error.description).toBe('the access token lacks a required scope')
  })

  it('compares scopes exactly', () => {
    for (const granted of [['orders:readonly'], ['orders'], ['ORDERS:READ'], ['orders:read ']]) {
      expect(failure(granted, rule(['orders:read'])).required).toEqual(['orders:read'])
    }
  })

  it('passes `any` with one of its scopes and throws naming all of them with none', () => {
    expect(() => requireScopes(principal(['y']), rule([], ['x', 'y']))).not.toThrow()
    const error = failure(['z'], rule([], ['x', 'y']))
    expect(error.required).toEqual(['x', 'y'])
    expect(error.internal.detail).toBe('none of x y')
  })

  it('checks `all` before `any` when a rule has both', () => {
    expect(failure(['x'], rule(['a'], ['x'])).required).toEqual(['a'])
    expect(failure(['a'], rule(['a'], ['x'])).required).toEqual(['x'])
    expect(() => requireScopes(principal(['a', 'x']), rule(['a'], ['x']))).not.toThrow()
  })
})
