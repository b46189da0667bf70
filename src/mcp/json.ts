/**
 * A strict JSON reader for MCP messages: RFC 8259 as V8's JSON.parse reads it, but refusing what
 * two JSON parsers may read two ways. The gateway decides on the tool name it reads here and the upstream
 * runs the one its own parser reads, so a body they could disagree on is refused, never guessed at:
 *
 * - a member name twice in one object (`{"name":"get","name":"delete"}`: JavaScript, Python and Go keep
 *   the last, other parsers the first or refuse), compared after unescaping (`"n\u0061me"` is `name`);
 * - a lone surrogate escape (`"\ud800"`: Go reads U+FFFD, Rust refuses, JavaScript keeps it);
 * - nesting deeper than {@link MAX_DEPTH} (a stack to exhaust, never an MCP message).
 *
 * Invalid UTF-8 and a byte order mark are refused by the caller, which decodes the bytes.
 */

export class JsonProblem extends Error {}

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

export const MAX_DEPTH = 64

const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d])
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }
const HEX4 = /^[0-9A-Fa-f]{4}$/

class Reader {
  at = 0
  constructor(private readonly text: string) {}

  fail(message: string): never {
    throw new JsonProblem(`${message} at character ${this.at + 1}`)
  }

  skipWhitespace(): void {
    while (WHITESPACE.has(this.text.charCodeAt(this.at))) this.at++
  }

  value(depth: number): JsonValue {
    this.skipWhitespace()
    const c = this.text[this.at]
    if (c === '{') return this.object(depth + 1)
    if (c === '[') return this.array(depth + 1)
    if (c === '"') return this.string()
    for (const [word, value] of [['true', true], ['false', false], ['null', null]] as const) {
      if (this.text.startsWith(word, this.at)) {
        this.at += word.length
        return value
      }
    }
    NUMBER.lastIndex = this.at
    const number = NUMBER.exec(this.text)
    if (number === null) this.fail(c === undefined ? 'unexpected end' : 'unexpected character')
    this.at += number[0].length
    return Number(number[0])
  }

  object(depth: number): { [key: string]: JsonValue } {
    if (depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH}`)
    this.at++
    // No prototype: `__proto__` is a member like any other.
    const out = Object.create(null) as { [key: string]: JsonValue }
    this.skipWhitespace()
    if (this.text[this.at] === '}') { this.at++; return out }
    for (;;) {
      this.skipWhitespace()
      if (this.text[this.at] !== '"') this.fail('expected a member name')
      const start = this.at
      const key = this.string()
      if (Object.hasOwn(out, key)) { this.at = start; this.fail(`the member ${JSON.stringify(key.slice(0, 64))} twice`) }
      this.skipWhitespace()
      if (this.text[this.at] !== ':') this.fail('expected ":"')
      this.at++
      out[key] = this.value(depth)
      this.skipWhitespace()
      const next = this.text[this.at++]
      if (next === '}') return out
      if (next !== ',') { this.at--; this.fail('expected "," or "}"') }
    }
  }

  array(depth: number): JsonValue[] {
    if (depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH}`)
    this.at++
    const out: JsonValue[] = []
    this.skipWhitespace()
    if (this.text[this.at] === ']') { this.at++; return out }
    for (;;) {
      out.push(this.value(depth))
      this.skipWhitespace()
      const next = this.text[this.at++]
      if (next === ']') return out
      if (next !== ',') { this.at--; this.fail('expected "," or "]"') }
    }
  }

  string(): string {
    const text = this.text
    let out = ''
    let from = ++this.at
    for (;;) {
      const code = text.charCodeAt(this.at)
      if (Number.isNaN(code)) this.fail('unterminated string')
      if (code < 0x20) this.fail('a control character in a string')
      if (code === 0x22) {
        out += text.slice(from, this.at++)
        return out
      }
      if (code !== 0x5c) { this.at++; continue }
      out += text.slice(from, this.at)
      const escape = text[this.at + 1] ?? ''
      if (escape === 'u') {
        const unit = this.hex(this.at + 2)
        this.at += 6
        if (unit >= 0xd800 && unit <= 0xdbff) {
          // A high surrogate must be followed by an escaped low one, else it is a lone surrogate.
          const low = text.startsWith('\\u', this.at) ? this.hex(this.at + 2) : -1
          if (low < 0xdc00 || low > 0xdfff) this.fail('a lone surrogate escape')
          out += String.fromCharCode(unit, low)
          this.at += 6
        } else if (unit >= 0xdc00 && unit <= 0xdfff) {
          this.fail('a lone surrogate escape')
        } else {
          out += String.fromCharCode(unit)
        }
      } else {
        const char = ESCAPES[escape]
        if (char === undefined) this.fail('an invalid escape')
        out += char
        this.at += 2
      }
      from = this.at
    }
  }

  hex(at: number): number {
    const digits = this.text.slice(at, at + 4)
    if (!HEX4.test(digits)) this.fail('an invalid \\u escape')
    return parseInt(digits, 16)
  }
}

/** One JSON value and nothing after it; throws JsonProblem saying what and where. */
export function parseStrictJson(text: string): JsonValue {
  const reader = new Reader(text)
  const value = reader.value(0)
  reader.skipWhitespace()
  if (reader.at !== text.length) reader.fail('text after the JSON value')
  return value
}
