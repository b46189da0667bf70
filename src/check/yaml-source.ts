/**
 * A config file's YAML: its value, and where each dotted path sits in the text for the error messages. The value comes
 * from the quick parser where the file is within what it reads as `yaml` does (yaml-quick.ts); `yaml`'s document,
 * which keeps every node's position, is then parsed only if a problem has to be placed.
 */
import { createRequire } from 'node:module'
import type { Document, LineCounter, Node } from 'yaml'
import { ConfigError, formatPath, sortIssues, type ConfigIssue, type ConfigPath } from './config-error.js'
import { quickYamlValue } from './yaml-quick.js'

const requireHere = createRequire(import.meta.url)

/** `yaml`, loaded only when a file is outside the quick parser's ground or a problem must be placed (30-45 ms). */
const loadYaml = (): typeof import('yaml') => requireHere('yaml') as typeof import('yaml')

export interface YamlSource {
  readonly value: unknown
  readonly locate: Locate
}

/** The file's value and its locator; a YAML syntax error is a ConfigError listing each with its place. */
export function readYaml(fileName: string, text: string): YamlSource {
  const value = quickYamlValue(text)
  if (value !== undefined) {
    let locate: Locate | undefined
    return { value, locate: (configPath, atKey) => (locate ??= parseYaml(fileName, text).locate)(configPath, atKey) }
  }
  return parseYaml(fileName, text)
}

function parseYaml(fileName: string, text: string): YamlSource {
  const { LineCounter, parseDocument } = loadYaml()
  const lineCounter = new LineCounter()
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  if (doc.errors.length > 0) {
    throw new ConfigError(fileName, sortIssues(doc.errors.map((error): ConfigIssue => {
      const { line, col } = lineCounter.linePos(error.pos[0])
      const message = error.message.split('\n')[0] ?? 'YAML syntax error'
      // A duplicate key is named exactly; for other syntax errors the key at the position may not be the culprit.
      const at = error.code === 'DUPLICATE_KEY' ? formatPath(pathAtOffset(doc.contents, error.pos[0])) : ''
      return { line, col, path: at, message }
    })))
  }
  return { value: doc.toJS({ maxAliasCount: 100 }), locate: makeLocator(doc, lineCounter) }
}

/** Finds where a dotted path sits in the YAML document (the key itself with `atKey`). */
export type Locate = (configPath: ConfigPath, atKey?: boolean) => { line: number; col: number }

function makeLocator(doc: Document, lineCounter: LineCounter): Locate {
  const { isMap, isPair, isScalar } = loadYaml()
  return (configPath, atKey = false) => {
    let offset = 0
    // Walk down as far as the path exists, so a missing key points at its parent.
    for (let depth = configPath.length; depth >= 0; depth--) {
      const prefix = configPath.slice(0, depth)
      if (atKey && depth === configPath.length && depth > 0) {
        const parent = prefix.length > 1 ? doc.getIn(prefix.slice(0, -1), true) : doc.contents
        if (isMap(parent)) {
          const pair = parent.items.find((item) => isPair(item) && isScalar(item.key) && item.key.value === prefix.at(-1))
          const range = pair && isScalar(pair.key) ? pair.key.range : undefined
          if (range) { offset = range[0]; break }
        }
        continue
      }
      const node = depth === 0 ? doc.contents : doc.getIn(prefix, true)
      const range = (node as { range?: [number, number, number] } | null | undefined)?.range
      if (range) { offset = range[0]; break }
    }
    const { line, col } = lineCounter.linePos(offset)
    return { line, col }
  }
}

/** The dotted path of the key or value at `offset` (where a YAML error points). */
function pathAtOffset(node: unknown, offset: number, at: (string | number)[] = []): (string | number)[] {
  const { isMap, isScalar, isSeq } = loadYaml()
  const inside = (n: unknown) => {
    const range = (n as Node | null | undefined)?.range
    return range !== undefined && range !== null && range[0] <= offset && offset < Math.max(range[1], range[0] + 1)
  }
  if (isMap(node)) {
    for (const pair of node.items) {
      const key = isScalar(pair.key) ? pair.key.value : undefined
      if (typeof key !== 'string' && typeof key !== 'number') continue
      if (inside(pair.key)) return [...at, String(key)]
      if (inside(pair.value)) return pathAtOffset(pair.value, offset, [...at, String(key)])
    }
  } else if (isSeq(node)) {
    for (const [index, item] of node.items.entries()) if (inside(item)) return pathAtOffset(item, offset, [...at, index])
  }
  return at
}
