import type { IncomingMessage } from 'node:http'
import { describe, expect, it } from 'vitest'
import { InvalidRequest } from '../errors/oauth-errors.js'
import { extractBearerToken, rejectQueryToken } from './bearer.js'

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
