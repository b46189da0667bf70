/**
 * Issue 19: the strict JSON reader of MCP messages (src/mcp/json.ts) reads what JSON.parse reads, and refuses
 * what JSON.parse refuses plus what two parsers could read two ways (duplicate members, lone surrogates).
 */
import { describe, expect, it } from 'vitest'
import { JsonProblem, MAX_DEPTH, parseStrictJson } from '../../src/mcp/json.js'

const SAME_AS_JSON_PARSE = [
  '{}', '[]', '0', '-0', '1.5e-3', '-12E+2', '1e400', '"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\"', 'true', 'false', 'null',
  ' \t\r\n{ "a" : [ 1 , { "b" : null } ] , "c" : "d" } \n',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order","arguments":{"list":[1,2,[3]],"s":"caf\u00e9"}}}',
  '{"__proto__":{"polluted":true},"constructor":1}',
  '{"a":{"name":1},"b":{"name":2}}',
]

const REFUSED_LIKE_JSON_PARSE = [
  '', ' ', '{', '{"a":1,}', '[1,]', '{a:1}', "{'a':1}", '01', '1.', '.5', '+1', '-', '1e', 'NaN', 'Infinity', 'tru', 'nul',
  '"a\nb"', '"\\x41"', '"\\u12"', '"\\u12G4"', '{"a" 1}', '[1 2]', '{} {}', '"unterminated', '/* c */ {}',
]

describe('parseStrictJson', () => {
  it.each(SAME_AS_JSON_PARSE)('reads %j as JSON.parse does', (text) => {
    expect(parseStrictJson(text)).toEqual(JSON.parse(text))
  })

  it('keeps __proto__ as a member, never as a prototype', () => {
    const value = parseStrictJson('{"__proto__":{"polluted":true}}') as Record<string, unknown>
    expect(Object.getPrototypeOf(value)).toBeNull()
    expect(Object.hasOwn(value, '__proto__')).toBe(true)
    expect(({} as Record<string, unknown>).polluted).toBeUndefined()
  })

  it.each(REFUSED_LIKE_JSON_PARSE)('refuses %j, as JSON.parse does', (text) => {
    expect(() => JSON.parse(text)).toThrow()
    expect(() => parseStrictJson(text)).toThrow(JsonProblem)
  })

  it.each([
    ['{"a":1,"a":1}', 'the member "a" twice at character 8'],
    ['{"name":"x","n\\u0061me":"y"}', 'the member "name" twice at character 13'],
    ['{"p":{"q":1,"q":2}}', 'the member "q" twice at character 13'],
    ['"\\ud800"', 'a lone surrogate escape at character 8'],
    ['"\\ud800\\u0041"', 'a lone surrogate escape at character 8'],
    ['"\\udc00"', 'a lone surrogate escape at character 8'],
  ])('refuses %j, which parsers read differently: %s', (text, message) => {
    expect(() => JSON.parse(text)).not.toThrow()
    expect(() => parseStrictJson(text)).toThrow(message)
  })

  it(`reads ${MAX_DEPTH} levels of nesting and refuses one more`, () => {
    expect(parseStrictJson(`${'['.repeat(MAX_DEPTH)}${']'.repeat(MAX_DEPTH)}`)).toBeInstanceOf(Array)
    expect(() => parseStrictJson(`${'[{"a":'.repeat(MAX_DEPTH / 2)}1${'}]'.repeat(MAX_DEPTH / 2)}`)).not.toThrow()
    expect(() => parseStrictJson(`${'['.repeat(MAX_DEPTH + 1)}${']'.repeat(MAX_DEPTH + 1)}`)).toThrow(`nested deeper than ${MAX_DEPTH}`)
    expect(() => parseStrictJson('['.repeat(100_000))).toThrow(JsonProblem)
  })
})
