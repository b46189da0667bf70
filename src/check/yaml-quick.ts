/**
 * A config file's value read by js-yaml's parser: for 10,000 routes 0.4 s the first time in a process and 0.12–0.23 s
 * after, where `yaml`'s parseDocument (which keeps every node's position and source tokens for the error messages)
 * takes 0.9–1.3 s (docs/performance.md, routes).
 *
 * Only for the part of YAML both parsers read alike, checked before anything is built: text without the forms below
 * (UNSHARED_TEXT, document markers), then on js-yaml's event stream one document without directives, no anchor, alias
 * or tag, no quoted scalar over several lines or with more after it on its line, no flow collection with more after
 * it on its line, no flow mapping over several lines but `{}`, and no mapping key that is a collection, spans lines
 * or is a plain scalar resolving to anything but a string (`~:`, `1.0:`, `<<:`, whose object keys `yaml` spells
 * otherwise). Plain scalars resolve as `yaml`'s YAML 1.2 core schema resolves them (yaml-core.ts), so `1_000`, `0b1` or `yes` stay
 * strings as there. Anything else, and any error, returns `undefined`, and the caller parses with `yaml`, which also
 * words and places every error. test/check/yaml-quick.test.ts holds the two to the same value, or a decline, on the
 * YAML test suite, every YAML file and block of this repository, and mutations of them.
 */
import {
  COLLECTION_STYLE, EVENT_ID, NOT_RESOLVED, SCALAR_STYLE, Schema as QuickSchema,
  constructFromEvents, defineScalarTag, getScalarValue, mapTag, parseEvents, seqTag, strTag, type Event,
} from 'js-yaml'
import { CORE_FIRST_CHARS, CORE_TAGS, NOT_CORE, resolveCore } from './yaml-core.js'

const SCHEMA = new QuickSchema([
  mapTag, seqTag, strTag,
  ...[...CORE_TAGS].map(([tagName, tests]) => defineScalarTag(tagName, {
    implicit: true,
    // js-yaml tries a tag only on scalars starting with one of these (yaml-core.ts).
    implicitFirstChars: [...CORE_FIRST_CHARS.get(tagName)!],
    resolve: (source: string) => {
      for (const { test, resolve } of tests) if (test.test(source)) return resolve(source)
      return NOT_RESOLVED
    },
    identify: () => false,
  })),
])

/**
 * Text the two read differently (each found by feeding both the YAML test suite's cases, mutated): a tab (`yaml`
 * refuses some where js-yaml reads spaces: indentation, a block scalar's lines); a carriage return not before a line
 * feed (`yaml` keeps it in a scalar, js-yaml breaks the line); a directive; a block scalar's indentation indicator or
 * keep chomping (`|2`, `>-1`, `|+`: trailing blank lines counted differently); an explicit key (`? `).
 */
const UNSHARED_TEXT = /\t|\r(?!\n)|^ *%|[|>][-+]?[1-9]|[|>]\+|(?:^|[\s[{,])\?(?:\s|$)/m
/** A character every match of UNSHARED_TEXT holds: most files have none, and one pass over them for these is quicker. */
const UNSHARED_CHARS = /[\t\r%|>?]/
const MARKER = /^ *(?:---|\.\.\.)(?=\s|$)/gm

/** Document markers: only a `---` opening the file (an indented one, a second one or `...` are read differently). */
function markersShared(text: string): boolean {
  for (const match of text.matchAll(MARKER)) if (match.index !== 0 || match[0] !== '---') return false
  return true
}

/** What may follow a quoted scalar's closing quote: its key's `:`, flow punctuation, a comment, the line's end. */
const AFTER_QUOTE = /(?: +#| *(?:[:,\]}]|\r?\n|$))/y

/**
 * A quoted scalar over several lines (escaped line breaks beside blank lines are folded differently), or with more
 * after its closing quote on the line (`- "a" b: c`, which js-yaml reads on and `yaml` refuses), is read differently.
 */
function quotedShared(text: string, valueStart: number, valueEnd: number): boolean {
  if (text.slice(valueStart, valueEnd).includes('\n')) return false
  AFTER_QUOTE.lastIndex = valueEnd + 1
  return AFTER_QUOTE.test(text)
}

const LINE_END = / *(?:#[^\n]*)?(?:\r?\n|$)/y

/**
 * Where the flow collection opening at `start` ends, if it is the last thing on its line (js-yaml reads on after one
 * closed mid-line, as in `- {}key: []`, where `yaml` refuses); -1 otherwise. Plain scalars in flow hold no `[]{},`;
 * a quote opens a scalar only where one starts; a comment needs a space before its `#`.
 */
function flowEnd(text: string, start: number): number {
  let depth = 0
  let scalarMayStart = true
  for (let at = start; at < text.length; at++) {
    const char = text[at]
    if (char === '[' || char === '{') { depth++; scalarMayStart = true } else if (char === ']' || char === '}') {
      if (--depth === 0) { LINE_END.lastIndex = at + 1; return LINE_END.test(text) ? at + 1 : -1 }
    } else if (char === ',' || char === ':') scalarMayStart = true
    else if (char === '#' && /\s/.test(text[at - 1] ?? '')) {
      const newline = text.indexOf('\n', at)
      if (newline < 0) return -1
      at = newline
    } else if ((char === '"' || char === "'") && scalarMayStart) {
      at = quotedEnd(text, at)
      if (at < 0) return -1
      scalarMayStart = false
    } else if (!/\s/.test(char ?? '')) scalarMayStart = false
  }
  return -1
}

/** The offset of the quote closing the one at `open` (`\\"` escapes in double quotes, `''` in single), or -1. */
function quotedEnd(text: string, open: number): number {
  const quote = text[open]
  for (let at = open + 1; at < text.length; at++) {
    if (quote === '"' && text[at] === '\\') at++
    else if (text[at] === quote) {
      if (quote === "'" && text[at + 1] === "'") at++
      else return at
    }
  }
  return -1
}

/** Whether a mapping key reads the same in both: a plain scalar `yaml`'s core schema leaves a string. */
function plainStringKey(text: string, event: Event): boolean {
  if (event.type !== EVENT_ID.SCALAR || text.slice(event.valueStart, event.valueEnd).includes('\n')) return false
  if (event.style !== SCALAR_STYLE.PLAIN) return true
  const key = getScalarValue(text, event)
  return key !== '<<' && resolveCore(key) === NOT_CORE
}

/** Whether the events stay within what both parsers read alike (see the module's comment). */
function withinCommonGround(text: string, events: Event[]): boolean {
  // One frame per open document or collection; in a mapping, whether its next node is a key.
  const open: { mapping: boolean; atKey: boolean; flow: boolean; oneLine: boolean }[] = []
  let documents = 0
  for (const [index, event] of events.entries()) {
    if (event.type === EVENT_ID.POP) { open.pop(); continue }
    if (event.type === EVENT_ID.DOCUMENT) {
      if (++documents > 1 || event.directives.length > 0) return false
      open.push({ mapping: false, atKey: false, flow: false, oneLine: false })
      continue
    }
    if (event.type === EVENT_ID.ALIAS || event.anchorStart !== -1 || event.tagStart !== -1) return false
    if (event.type === EVENT_ID.SCALAR && (event.style === SCALAR_STYLE.DOUBLE_QUOTED || event.style === SCALAR_STYLE.SINGLE_QUOTED) &&
      !quotedShared(text, event.valueStart, event.valueEnd)) return false
    const parent = open.at(-1)
    if (parent?.mapping === true) {
      if (parent.atKey && !plainStringKey(text, event)) return false
      parent.atKey = !parent.atKey
    }
    if (event.type === EVENT_ID.MAPPING || event.type === EVENT_ID.SEQUENCE) {
      const mapping = event.type === EVENT_ID.MAPPING
      const flow = event.style === COLLECTION_STYLE.FLOW
      let oneLine = parent?.oneLine === true
      if (flow && parent?.flow === false) {
        const end = flowEnd(text, event.start)
        if (end < 0) return false
        oneLine = !text.slice(event.start, end).includes('\n')
      }
      // A flow mapping's implicit keys over lines (`{ a\n b: c }`) are where the two part; on one line, or `{}`, alike.
      if (mapping && flow && !oneLine && events[index + 1]?.type !== EVENT_ID.POP) return false
      open.push({ mapping, atKey: mapping, flow, oneLine })
    }
  }
  return documents === 1
}

/** The file's value, when it is within the ground both parsers share; `undefined` for `yaml` to parse it. */
export function quickYamlValue(text: string): unknown {
  if ((UNSHARED_CHARS.test(text) && UNSHARED_TEXT.test(text)) || !markersShared(text)) return undefined
  try {
    const events = parseEvents(text, {})
    if (!withinCommonGround(text, events)) return undefined
    const [value] = constructFromEvents(events, { source: text, schema: SCHEMA, maxAliases: 0 })
    return value
  } catch {
    return undefined
  }
}
