import { describe, expect, it } from 'vitest'
import { ClaimPathError, parseClaimPath, readClaim } from './path.js'

const segments = (text: string) => parseClaimPath(text).segments

function failure(text: string): { message: string; offset: number } {
  try {
    parseClaimPath(text)
  } catch (error) {
    if (error instanceof ClaimPathError) return { message: error.message, offset: error.offset }
    throw error
  }
  throw new Error(`${text} parsed`)
}

describe('parseClaimPath', () => {
  it('reads the paths of the big providers: nested, with -, :, / in names, and quoted names with dots', () => {
    expect(segments('tenant')).toEqual(['tenant'])
    expect(segments('realm_access.roles')).toEqual(['realm_access', 'roles'])
    expect(segments('resource_access.orders-api.roles')).toEqual(['resource_access', 'orders-api', 'roles'])
    expect(segments('cognito:groups')).toEqual(['cognito:groups'])
    expect(segments('["https://example.com/roles"]')).toEqual(['https://example.com/roles'])
    expect(segments("['https://example.com/roles']")).toEqual(['https://example.com/roles'])
    expect(segments('resource_access["orders.api"].roles')).toEqual(['resource_access', 'orders.api', 'roles'])
    expect(segments('a["b"]["c"]')).toEqual(['a', 'b', 'c'])
    expect(segments('["say \\"hi\\""]')).toEqual(['say "hi"'])
    expect(segments('["back\\\\slash"]')).toEqual(['back\\slash'])
  })

  it('refuses what it cannot read, saying where', () => {
    expect(failure('')).toMatchObject({ message: 'is empty' })
    expect(failure('a..b')).toMatchObject({ message: 'has an empty claim name (".." or a leading ".")', offset: 2 })
    expect(failure('a.')).toMatchObject({ message: 'ends with "."', offset: 1 })
    expect(failure('.a')).toMatchObject({ message: 'has an empty claim name (".." or a leading ".")', offset: 0 })
    expect(failure('a b')).toMatchObject({ offset: 1 })
    expect(failure('["open')).toMatchObject({ message: 'has an unterminated quoted name', offset: 0 })
    expect(failure('[name]')).toMatchObject({ offset: 1 })
    expect(failure('[""]')).toMatchObject({ message: 'has an empty quoted name' })
    expect(failure('["a"]x')).toMatchObject({ offset: 5 })
    expect(failure('["a\\n"]')).toMatchObject({ offset: 3 })
    expect(failure('"quoted"')).toMatchObject({ offset: 0 })
  })

  it('tells a user who wrote a URL-named claim bare to quote it (it would read as two nested claims)', () => {
    expect(failure('https://example.com/roles').message).toBe('looks like a URL: quote a claim name that holds dots, as ["https://example.com/roles"]')
  })

  it('bounds the length and the depth', () => {
    expect(failure('a'.repeat(257)).message).toBe('is longer than 256 characters')
    expect(segments(Array.from({ length: 8 }, () => 'a').join('.'))).toHaveLength(8)
    expect(failure(Array.from({ length: 9 }, () => 'a').join('.'))).toEqual({ message: 'is nested deeper than 8 levels', offset: 16 })
    expect(failure(`${Array.from({ length: 8 }, () => 'a').join('.')}["b"]`)).toEqual({ message: 'is nested deeper than 8 levels', offset: 15 })
  })
})

describe('readClaim', () => {
  const claims = JSON.parse(JSON.stringify({
    tenant: 'acme',
    realm_access: { roles: ['reader'] },
    'https://example.com/roles': ['admin'],
    empty: null,
    list: [{ a: 1 }],
    nested: { 'dotted.name': 2 },
  })) as Record<string, unknown>

  it('walks own properties of objects', () => {
    expect(readClaim(claims, parseClaimPath('tenant'))).toBe('acme')
    expect(readClaim(claims, parseClaimPath('realm_access.roles'))).toEqual(['reader'])
    expect(readClaim(claims, parseClaimPath('["https://example.com/roles"]'))).toEqual(['admin'])
    expect(readClaim(claims, parseClaimPath('nested["dotted.name"]'))).toBe(2)
  })

  it('finds nothing a token did not carry: prototype names, array members, steps through strings, null', () => {
    for (const path of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'tenant.length', 'realm_access.roles.length',
      'realm_access.roles.0', 'list.0.a', 'realm_access.constructor.name', 'empty', 'missing', 'missing.deeper']) {
      expect(readClaim(claims, parseClaimPath(path)), path).toBeUndefined()
    }
    expect(readClaim(undefined, parseClaimPath('tenant'))).toBeUndefined()
  })

  it('reads a token that really carries __proto__ as a claim as that claim, without touching any prototype', () => {
    const hostile = JSON.parse('{"__proto__": {"admin": true}, "constructor": {"prototype": 1}}') as Record<string, unknown>
    expect(readClaim(hostile, parseClaimPath('__proto__.admin'))).toBe(true)
    expect(readClaim(hostile, parseClaimPath('constructor.prototype'))).toBe(1)
    expect(({} as Record<string, unknown>).admin).toBeUndefined()
  })
})
