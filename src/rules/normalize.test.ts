import { describe, expect, it } from 'vitest'
import { MalformedRequest } from '../errors/oauth-errors.js'
import { splitRequestTarget } from './normalize.js'

function refusal(url: string): unknown {
  try {
    splitRequestTarget(url)
  } catch (error) {
    return error
  }
  return undefined
}

describe('splitRequestTarget', () => {
  it.each([
    '/a/b',
    '/',
    '/a/',
    '/a/b.json',
    '/a/...',
    '/a/.hidden',
    '/a/b..c',
    '/a%20b/%E2%82%AC',
    '/a%3Ab/%40',
    "/x:y@z!$&'()*+,=",
    '/100%25',
  ])('passes %s through unchanged', (path) => {
    expect(splitRequestTarget(path)).toEqual({ path, query: '' })
  })

  it('splits off the query string, "?" included, without looking inside it', () => {
    expect(splitRequestTarget('/a?b=%2F&c=..&d=%2e%2e/&e')).toEqual({ path: '/a', query: '?b=%2F&c=..&d=%2e%2e/&e' })
    expect(splitRequestTarget('/a?')).toEqual({ path: '/a', query: '?' })
  })

  it.each([
    ['a raw dot-dot segment', '/public/../admin'],
    ['a raw dot segment', '/a/./b'],
    ['a trailing dot-dot segment', '/a/..'],
    ['a trailing dot segment', '/a/.'],
    ['a leading dot-dot segment', '/..'],
    ['an encoded dot-dot segment', '/a/%2e%2e/b'],
    ['an encoded dot-dot segment in mixed case', '/a/%2E%2e/b'],
    ['a half-encoded dot-dot segment', '/a/.%2e/b'],
    ['an encoded dot segment', '/a/%2E/b'],
    ['an encoded slash', '/a%2fb'],
    ['an encoded slash in upper case', '/a%2Fb'],
    ['an encoded backslash', '/a%5cb'],
    ['a raw backslash', '/a\\b'],
    ['an encoded NUL', '/a%00b'],
    ['a raw NUL', '/a\u0000b'],
    ['an encoded control character', '/a%0ab'],
    ['an empty segment', '//a'],
    ['an empty segment in the middle', '/a//b'],
    ['a Tomcat path parameter after dot-dot', '/public/..;/admin'],
    ['a path parameter', '/admin;jsessionid=x/secret'],
    ['an encoded semicolon', '/admin%3bx/secret'],
    ['an encoded unreserved letter', '/%61dmin'],
    ['an encoded unreserved digit', '/v%31'],
    ['an encoded tilde', '/%7Euser'],
    ['an encoded hyphen', '/a%2db'],
    ['an encoded underscore', '/a%5Fb'],
    ['a broken escape', '/a%zz'],
    ['a truncated escape', '/a%2'],
    ['a fragment', '/a#b'],
    ['a space', '/a b'],
    ['absolute-form', 'http://127.0.0.1/admin'],
    ['asterisk-form', '*'],
    ['authority-form', '127.0.0.1:443'],
    ['an empty target', ''],
  ])('refuses %s (%s) as invalid_request', (_what, url) => {
    const error = refusal(url)
    expect(error).toBeInstanceOf(MalformedRequest)
    expect((error as MalformedRequest).code).toBe('invalid_request')
    expect((error as MalformedRequest).status).toBe(400)
  })
})
