import type { IncomingMessage } from 'node:http'
import { describe, expect, it } from 'vitest'
import { InvalidRequest } from '../errors/oauth-errors.js'
import { bearerToken, extractBearerToken, rejectQueryToken } from './bearer.js'
import { tokenHash } from './token-cache.js'

/** The two fields extractBearerToken reads, shaped as node:http fills them. */
function request(...authorization: string[]): IncomingMessage {
  const rawHeaders = ['Host', 'x', ...authorization.flatMap((value) => ['Authorization', value])]
  return { headers: authorization.length > 0 ? { authorization: authorization[0] } : {}, rawHeaders } as Partial<IncomingMessage> as IncomingMessage
}

function rejection(run: () => unknown): InvalidRequest {
  try {
    run()
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidRequest)
    return error as InvalidRequest
  }
  throw new Error('did not throw')
}

describe('extractBearerToken', () => {
  it('returns the token68 of a Bearer header, scheme in any case', () => {
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      expect(extractBearerToken(request(`${scheme} abc.DEF-_~+/==`), 100)).toBe('abc.DEF-_~+/==')
    }
  })

  it('returns undefined for no header or another scheme (RFC 6750 §3.1: no credentials)', () => {
    expect(extractBearerToken(request(), 100)).toBeUndefined()
    expect(extractBearerToken(request('Basic YTpi'), 100)).toBeUndefined()
    expect(extractBearerToken(request('DPoP abc'), 100)).toBeUndefined()
  })

  it('refuses malformed Bearer credentials', () => {
    for (const header of ['Bearer', 'Bearer a b', 'Bearer a=b', 'Bearer "a"', 'Bearer a,b', 'Bearer\ta', 'Bearer =abc']) {
      expect(rejection(() => extractBearerToken(request(header), 100)).status, header).toBe(400)
    }
    expect(rejection(() => extractBearerToken(request(''), 100)).description).toBe('malformed Authorization header')
  })

  it('refuses two Authorization headers, whatever their schemes', () => {
    expect(rejection(() => extractBearerToken(request('Bearer a', 'Bearer a'), 100)).description).toBe('more than one Authorization header')
    expect(rejection(() => extractBearerToken(request('Basic YTpi', 'Bearer a'), 100)).description).toBe('more than one Authorization header')
  })

  it('limits the token itself to maxTokenSize bytes, spaces and scheme not counted', () => {
    expect(extractBearerToken(request(`Bearer ${'a'.repeat(64)}`), 64)).toHaveLength(64)
    expect(extractBearerToken(request(`Bearer     ${'a'.repeat(64)}`), 64)).toHaveLength(64)
    expect(rejection(() => extractBearerToken(request(`Bearer ${'a'.repeat(65)}`), 64)).description).toBe('the access token is too large')
  })
})

describe('bearerToken: the token and its hash, kept with the connection', () => {
  /** Requests on one connection (a plain object stands for the socket). */
  const on = (connection: object) => (...authorization: string[]) =>
    Object.assign(request(...authorization), { socket: connection }) as IncomingMessage

  it('gives every header its own token and hash on one connection, whatever came before', () => {
    const send = on({})
    const tokens = ['abc.def.ghi', 'abc.def.ghj', 'abc.def.gh', 'xyz']
    for (const token of [...tokens, ...tokens.reverse()]) {
      const found = bearerToken(send(`Bearer ${token}`), 100)
      expect(found).toMatchObject({ token, hash: tokenHash(token) })
    }
    // The same token in another spelling of the header.
    expect(bearerToken(send('bearer  xyz'), 100)).toMatchObject({ token: 'xyz', hash: tokenHash('xyz') })
  })

  it('checks for a second Authorization header on every request, the kept one included', () => {
    const send = on({})
    expect(bearerToken(send('Bearer abc'), 100)?.token).toBe('abc')
    expect(rejection(() => bearerToken(send('Bearer abc', 'Bearer abc'), 100)).description).toBe('more than one Authorization header')
    expect(rejection(() => bearerToken(send('Bearer abc', 'Bearer other'), 100)).description).toBe('more than one Authorization header')
  })

  it('applies the size limit of each request to the kept token (a reload may lower it)', () => {
    const send = on({})
    expect(bearerToken(send(`Bearer ${'a'.repeat(64)}`), 64)?.token).toHaveLength(64)
    expect(rejection(() => bearerToken(send(`Bearer ${'a'.repeat(64)}`), 63)).description).toBe('the access token is too large')
  })

  it('refuses a malformed header after a good one, and reads another scheme as no Bearer credentials', () => {
    const send = on({})
    expect(bearerToken(send('Bearer abc'), 100)?.token).toBe('abc')
    expect(rejection(() => bearerToken(send('Bearer abc def'), 100)).description).toBe('malformed Bearer credentials')
    expect(rejection(() => bearerToken(send('Bearer abc"'), 100)).description).toBe('malformed Bearer credentials')
    expect(bearerToken(send('Basic YWJj'), 100)).toBeUndefined()
    expect(bearerToken(send(), 100)).toBeUndefined()
    expect(bearerToken(send('Bearer abc'), 100)?.token).toBe('abc')
  })

  it('keeps no header over 4 KiB on an idle connection (memory a client could pile up over many connections)', () => {
    const connection = {}
    const long = `Bearer ${'a'.repeat(5000)}`
    expect(bearerToken(on(connection)(long), 8192)).toMatchObject({ token: 'a'.repeat(5000), hash: tokenHash('a'.repeat(5000)) })
    expect(Object.getOwnPropertySymbols(connection)).toEqual([])
    expect(bearerToken(on(connection)('Bearer short'), 8192)?.token).toBe('short')
    expect(Object.getOwnPropertySymbols(connection)).toHaveLength(1)
  })

  it('keeps nothing from one connection for another', () => {
    const first = {}
    const second = {}
    expect(bearerToken(on(first)('Bearer abc'), 100)?.token).toBe('abc')
    expect(bearerToken(on(second)('Bearer xyz'), 100)?.token).toBe('xyz')
    expect(bearerToken(on(first)('Bearer abc'), 100)?.hash).toBe(tokenHash('abc'))
    expect(Object.getOwnPropertySymbols(second).map((symbol) => (second as Record<symbol, { token: string }>)[symbol]!.token)).toEqual(['xyz'])
  })
})

describe('rejectQueryToken', () => {
  it('refuses access_token in the query however it is spelled on the wire', () => {
    for (const query of ['?access_token=x', '?a=1&access_token=x', '?access_token=', '?access_token', '?access%5Ftoken=x', '?%61ccess_token=x', '?x=1;&access_token=y']) {
      expect(() => rejectQueryToken(query), query).toThrow(InvalidRequest)
    }
  })

  it('lets other queries through', () => {
    for (const query of ['', '?', '?a=1', '?q=access_token', '?access_tokens=x', '?x=%41', '?my_access_token=x']) {
      expect(() => rejectQueryToken(query), query).not.toThrow()
    }
  })
})
