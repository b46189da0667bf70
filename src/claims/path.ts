/**
 * Claim paths: how the config names a claim, nested or not. Segments are separated by `.`; a
 * segment whose name holds `.`, a quote, a bracket or a space is written in brackets and quotes:
 *
 *   tenant                               the top-level claim `tenant`
 *   realm_access.roles                   `roles` inside the object `realm_access` (Keycloak)
 *   resource_access.orders-api.roles     `-`, `:` and `/` need no quoting: `cognito:groups` is one segment
 *   ["https://example.com/roles"]        a name with dots (Auth0's namespaced claims)
 *   resource_access["orders.api"].roles  brackets after a segment, no dot between
 *
 * Paths are parsed once, at load; reading one walks own properties only, so `constructor` or `__proto__`
 * never find something a token did not carry.
 */

export interface ClaimPath {
  /** The path as written in the config: for logs, docs and error messages. */
  readonly text: string
  readonly segments: readonly string[]
}

export class ClaimPathError extends Error {
  /** 0-based offset into the path text where it went wrong. */
  constructor(message: string, readonly offset: number) {
    super(message)
  }
}

/** Bounds that no real token needs more of: a path is config, but it is also walked on every request. */
export const MAX_PATH_LENGTH = 256
export const MAX_DEPTH = 8

// A bare segment: anything visible but the separators and quotes (so `orders-api`, `cognito:groups`, `a/b`).
const BARE = /^[^.[\]"'\s\\]+/

export function parseClaimPath(text: string): ClaimPath {
  if (text.length === 0) throw new ClaimPathError('is empty', 0)
  if (text.length > MAX_PATH_LENGTH) throw new ClaimPathError(`is longer than ${MAX_PATH_LENGTH} characters`, MAX_PATH_LENGTH)
  const segments: string[] = []
  let i = 0
  for (;;) {
    if (text[i] === '[') {
      i = readBracketed(text, i, segments)
    } else {
      const bare = BARE.exec(text.slice(i))
      if (!bare) {
        const char = text[i]
        if (char === undefined) throw new ClaimPathError('ends with "."', i - 1)
        if (char === '.') throw new ClaimPathError('has an empty claim name (".." or a leading ".")', i)
        throw new ClaimPathError(`has ${JSON.stringify(char)} where a claim name should start ` +
          '(quote names with dots, quotes or spaces: ["https://example.com/roles"])', i)
      }
      segments.push(bare[0])
      i += bare[0].length
      // `https://example.com/roles` unquoted would read as the claims `https://example`, `com/roles`.
      if (bare[0].includes('://')) {
        throw new ClaimPathError(`looks like a URL: quote a claim name that holds dots, as ["${text}"]`, 0)
      }
    }
    while (text[i] === '[') {
      if (segments.length === MAX_DEPTH) throw new ClaimPathError(`is nested deeper than ${MAX_DEPTH} levels`, i)
      i = readBracketed(text, i, segments)
    }
    if (i === text.length) return { text, segments }
    if (text[i] !== '.') throw new ClaimPathError(`has ${JSON.stringify(text[i])} where "." or the end should be`, i)
    i++
    if (segments.length === MAX_DEPTH) throw new ClaimPathError(`is nested deeper than ${MAX_DEPTH} levels`, i)
  }
}

/** `["name"]` or `['name']` from `start` (at the `[`); `\"`, `\'` and `\\` escape. Returns the offset after `]`. */
function readBracketed(text: string, start: number, segments: string[]): number {
  const quote = text[start + 1]
  if (quote !== '"' && quote !== "'") throw new ClaimPathError('has "[" without a quoted name after it (write ["name"])', start + 1)
  let name = ''
  let i = start + 2
  for (;;) {
    const char = text[i]
    if (char === undefined) throw new ClaimPathError('has an unterminated quoted name', start)
    if (char === quote) break
    if (char === '\\') {
      const next = text[i + 1]
      if (next !== '"' && next !== "'" && next !== '\\') throw new ClaimPathError('has "\\" not followed by a quote or "\\"', i)
      name += next
      i += 2
      continue
    }
    name += char
    i++
  }
  if (name === '') throw new ClaimPathError('has an empty quoted name', start)
  if (text[i + 1] !== ']') throw new ClaimPathError('has a quoted name not followed by "]"', i + 1)
  segments.push(name)
  return i + 2
}

/**
 * The value at `path` in a JSON object, or undefined when any step is missing, is not an own property, or
 * is not an object (arrays are not indexed: a path names members of objects only). JSON `null` reads as
 * missing.
 */
export function readClaim(claims: Readonly<Record<string, unknown>> | undefined, path: ClaimPath): unknown {
  let value: unknown = claims
  const segments = path.segments
  for (let i = 0; i < segments.length; i++) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined
    const name = segments[i]!
    if (!Object.hasOwn(value, name)) return undefined
    value = (value as Record<string, unknown>)[name]
  }
  return value === null ? undefined : value
}
