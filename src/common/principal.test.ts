import { describe, expect, it } from 'vitest'
import { readScopes } from './principal.js'

describe('readScopes', () => {
  it('splits a space-delimited `scope` string, ignoring repeated spaces', () => {
    expect(readScopes({ scope: ' a  b c ' }, undefined)).toEqual(['a', 'b', 'c'])
    expect(readScopes({ scope: '' }, 'scope')).toEqual([])
  })

  it('reads `scp` as an array or as a string', () => {
    expect(readScopes({ scp: ['a', 'b'] }, 'scp')).toEqual(['a', 'b'])
    expect(readScopes({ scp: 'a b' }, 'scp')).toEqual(['a', 'b'])
    expect(readScopes({ scp: [] }, 'scp')).toEqual([])
  })

  it('tries `scope` then `scp` when no claim is configured', () => {
    expect(readScopes({ scope: 'a', scp: ['b'] }, undefined)).toEqual(['a'])
    expect(readScopes({ scp: ['b'] }, undefined)).toEqual(['b'])
    expect(readScopes({}, undefined)).toEqual([])
  })

  it('reads only the configured claim', () => {
    expect(readScopes({ scope: 'a' }, 'scp')).toEqual([])
    expect(readScopes({ scp: ['b'] }, 'scope')).toEqual([])
  })

  it('refuses a scope claim that is a JSON array unless the issuer reads scope_array (RFC 9068 §2.2.3)', () => {
    expect(readScopes({ scope: ['a', 'b'] }, 'scope')).toBeUndefined()
    expect(readScopes({ scope: ['a', 'b'] }, undefined)).toBeUndefined()
    expect(readScopes({ scope: ['a', 'b'] }, 'scope_array')).toEqual(['a', 'b'])
    expect(readScopes({ scope: 'a b' }, 'scope_array')).toEqual(['a', 'b'])
    expect(readScopes({ scope: ['a b'] }, 'scope_array')).toBeUndefined()
    expect(readScopes({ scp: ['a'] }, 'scope_array')).toEqual([])
  })

  it('calls a malformed claim malformed (undefined) rather than granting anything', () => {
    for (const value of [42, true, null, { a: 1 }, ['a', 1], ['a b'], [''], ['a\tb'], 'a "b"', 'a\\b', ['é']]) {
      expect(readScopes({ scope: value }, undefined), JSON.stringify(value)).toBeUndefined()
      expect(readScopes({ scp: value }, 'scp'), JSON.stringify(value)).toBeUndefined()
    }
  })

  it('accepts every RFC 6749 §3.3 NQCHAR in a scope token', () => {
    const nqchars = ['!', ...Array.from({ length: 0x5b - 0x23 + 1 }, (_, i) => String.fromCharCode(0x23 + i)),
      ...Array.from({ length: 0x7e - 0x5d + 1 }, (_, i) => String.fromCharCode(0x5d + i))].join('')
    expect(readScopes({ scope: nqchars }, 'scope')).toEqual([nqchars])
  })
})
