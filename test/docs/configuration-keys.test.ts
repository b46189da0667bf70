/**
 * docs/configuration.md documents every key of the configuration schema, and only keys the schema has.
 *
 * The convention the doc follows (its "How keys are written" section says the same):
 * - A key is documented by a row of a *key table*: a Markdown table whose first header cell is `key`. Each
 *   backticked token of a row's first cell is one key, written as its full dotted path from the top of the
 *   file: `server.listen`, `issuers[].introspection.endpoint` (`[]` is any element of a list),
 *   `upstreams.<name>.url` (`<…>` is any name of a map, whatever word is in the brackets).
 * - Structures the schema uses in several places are documented once, as a *type*: rows whose path starts
 *   with the type's capitalised name (`ClaimCondition.claim`); a row `routes[].claims: ClaimConditions`
 *   says that key is of that type, so it documents `routes[].claims` and every key of the type under it.
 * - A key documents its parents (`server.tls.cert_file` documents `server.tls`).
 * Keys mentioned in prose or in the meaning column do not count: every key needs a row.
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { GatewayConfigSchema } from '../../src/config/schema.js'

const DOC_PATH = new URL('../../docs/configuration.md', import.meta.url)

type Json = { readonly [key: string]: unknown }
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The placeholder for any name of a map, on both sides of the comparison. */
const ANY_NAME = '<name>'

/**
 * Every key path of a JSON schema: the named properties of every object, reached through `properties`, array
 * `items` (`[]`), maps (`patternProperties` and `additionalProperties` schemas: `<name>`), `anyOf`/`oneOf`/`allOf`
 * and `$ref` (resolved against the `$id`s and `$defs` of the schema itself).
 */
function schemaKeys(root: Json): Set<string> {
  const byId = new Map<string, Json>()
  const index = (schema: unknown, seen = new Set<unknown>()): void => {
    if (!isObject(schema) && !Array.isArray(schema)) return
    if (seen.has(schema)) return
    seen.add(schema)
    if (isObject(schema) && typeof schema.$id === 'string') byId.set(schema.$id, schema)
    for (const value of Object.values(schema)) index(value, seen)
  }
  index(root)
  const resolve = (ref: string): Json => {
    const found = byId.get(ref) ?? (ref.startsWith('#/') ? ref.slice(2).split('/').reduce<unknown>((node, part) => isObject(node) ? node[part] : undefined, root) : undefined)
    if (!isObject(found)) throw new Error(`the schema's $ref ${ref} does not resolve`)
    return found
  }

  const keys = new Set<string>()
  const walk = (schema: unknown, path: string, refs: readonly string[]): void => {
    if (!isObject(schema)) return
    if (typeof schema.$ref === 'string') {
      if (refs.includes(schema.$ref)) return  // a recursive type: its keys were listed on the first pass
      walk(resolve(schema.$ref), path, [...refs, schema.$ref])
    }
    for (const combinator of ['anyOf', 'oneOf', 'allOf'] as const) {
      const members = schema[combinator]
      if (Array.isArray(members)) for (const member of members) walk(member, path, refs)
    }
    if (isObject(schema.properties)) {
      for (const [name, child] of Object.entries(schema.properties)) {
        const key = path === '' ? name : `${path}.${name}`
        keys.add(key)
        walk(child, key, refs)
      }
    }
    const entry = path === '' ? ANY_NAME : `${path}.${ANY_NAME}`
    if (isObject(schema.patternProperties)) for (const child of Object.values(schema.patternProperties)) walk(child, entry, refs)
    if (isObject(schema.additionalProperties)) walk(schema.additionalProperties, entry, refs)
    const items = [schema.items, schema.prefixItems].flatMap((each) => Array.isArray(each) ? each : [each])
    for (const item of items) walk(item, `${path}[]`, refs)
  }
  walk(root, '', [])
  return keys
}

/** A documented key as written: its path, and the type it is declared to have (`routes[].claims: ClaimConditions`). */
interface DocKey { readonly path: string; readonly type: string | undefined; readonly line: number }

const SEGMENT = String.raw`(?:[A-Za-z_][A-Za-z0-9_]*|<[^<>]+>)(?:\[\])*`
const KEY_TOKEN = new RegExp(String.raw`^(${SEGMENT}(?:\.${SEGMENT})*)(?::\s*([A-Z][A-Za-z0-9]*))?$`)

/** The cells of a Markdown table row, split on `|` outside backticks (and not `\|`). */
function cells(row: string): string[] {
  const out: string[] = []
  let cell = ''
  let code = false
  const text = row.trim().replace(/^\|/, '').replace(/\|$/, '')
  for (let i = 0; i < text.length; i++) {
    const char = text[i]!
    if (char === '\\' && text[i + 1] === '|') { cell += '|'; i++; continue }
    if (char === '`') code = !code
    if (char === '|' && !code) { out.push(cell.trim()); cell = ''; continue }
    cell += char
  }
  out.push(cell.trim())
  return out
}

/** Every key of every key table of a Markdown document, and first cells that are not keys (the convention's breaches). */
function documentedKeys(markdown: string): { keys: DocKey[]; unreadable: string[] } {
  const keys: DocKey[] = []
  const unreadable: string[] = []
  const lines = markdown.split('\n')
  let fence = false
  let inKeyTable = false
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!
    if (/^\s*(```|~~~)/.test(line)) { fence = !fence; inKeyTable = false; continue }
    if (fence) continue
    if (!line.trimStart().startsWith('|')) { inKeyTable = false; continue }
    const row = cells(line)
    const previous = lines[i - 1]?.trimStart() ?? ''
    if (!previous.startsWith('|')) {  // a header row
      inKeyTable = row[0]!.toLowerCase() === 'key'
      continue
    }
    if (!inKeyTable || /^:?-+:?$/.test(row[0]!)) continue
    const tokens = [...row[0]!.matchAll(/`([^`]+)`/g)].map((match) => match[1]!)
    if (tokens.length === 0) unreadable.push(`line ${i + 1}: no backticked key in ${JSON.stringify(row[0])}`)
    for (const token of tokens) {
      const match = KEY_TOKEN.exec(token.trim())
      if (!match) {
        unreadable.push(`line ${i + 1}: ${JSON.stringify(token)} is not a key path`)
        continue
      }
      keys.push({ path: match[1]!.replace(/<[^<>]+>/g, ANY_NAME), type: match[2], line: i + 1 })
    }
  }
  return { keys, unreadable }
}

const isTypePath = (path: string) => /^[A-Z]/.test(path)
/** A key's own path without a trailing `[]` or `.<name>`: `routes[].mcp.tools.<name>` is the key `routes[].mcp.tools`. */
const keyOf = (path: string) => path.replace(new RegExp(String.raw`(\[\]|\.${ANY_NAME})+$`), '')

/** Parents of a key: `a.b[].c` → `a`, `a.b`; map entries (`….<name>`) are not keys. */
function parentsOf(path: string): string[] {
  const parts = path.split('.')
  const out: string[] = []
  for (let i = 1; i < parts.length; i++) {
    const parent = keyOf(parts.slice(0, i).join('.'))
    if (!parent.endsWith(ANY_NAME) && parent !== '') out.push(parent)
  }
  return out
}

/**
 * The full key paths the document documents: its top-level rows, with every typed row expanded into the keys
 * of its type; and what it gets wrong about types (one used but never defined, one defined but never used).
 */
function expandDocumented(keys: readonly DocKey[]): { explicit: Map<string, number>; documented: Set<string>; typeProblems: string[] } {
  const types = new Map<string, DocKey[]>()
  for (const key of keys.filter((k) => isTypePath(k.path))) {
    const [name, ...rest] = key.path.split('.')
    if (rest.length === 0) continue
    const list = types.get(name!) ?? []
    list.push({ ...key, path: rest.join('.') })
    types.set(name!, list)
  }
  const used = new Set<string>()
  const typeProblems: string[] = []
  const explicit = new Map<string, number>()
  const expand = (entries: readonly DocKey[], prefix: string, stack: readonly string[]): void => {
    for (const entry of entries) {
      const full = prefix === '' ? entry.path : `${prefix}.${entry.path}`
      explicit.set(keyOf(full), entry.line)
      if (entry.type === undefined) continue
      used.add(entry.type)
      const members = types.get(entry.type)
      if (members === undefined) typeProblems.push(`line ${entry.line}: type ${entry.type} has no rows (write its keys as ${entry.type}.<key>)`)
      else if (stack.includes(entry.type)) typeProblems.push(`line ${entry.line}: type ${entry.type} contains itself`)
      else expand(members, full, [...stack, entry.type])
    }
  }
  expand(keys.filter((k) => !isTypePath(k.path)), '', [])
  for (const name of types.keys()) if (!used.has(name)) typeProblems.push(`type ${name} is defined but no key is declared to be of it`)
  const documented = new Set<string>()
  for (const key of explicit.keys()) for (const each of [key, ...parentsOf(key)]) documented.add(each)
  return { explicit, documented, typeProblems }
}

describe('docs/configuration.md against the configuration schema', () => {
  const markdown = readFileSync(DOC_PATH, 'utf8')
  const schema = schemaKeys(GatewayConfigSchema as unknown as Json)
  const { keys, unreadable } = documentedKeys(markdown)
  const { explicit, documented, typeProblems } = expandDocumented(keys)

  it('reads the schema and the doc (the walk finds keys at every depth, the doc has key tables)', () => {
    expect(schema.has('server.listen')).toBe(true)
    expect(schema.has('issuers[].introspection.endpoint')).toBe(true)
    expect(schema.has(`upstreams.${ANY_NAME}.url`)).toBe(true)
    expect(schema.has('authorization_server.clients[].redirect_uris')).toBe(true)
    expect(explicit.size).toBeGreaterThan(100)
  })

  it('writes every key-table row as key paths, and every type it uses has rows', () => {
    const problems = [...unreadable, ...typeProblems]
    expect(problems, `docs/configuration.md breaks the key-table convention:\n  ${problems.join('\n  ')}`).toEqual([])
  })

  it('documents every key of the schema', () => {
    const missing = [...schema].filter((key) => !documented.has(key)).sort()
    expect(missing, `keys of src/config/schema.ts with no row in docs/configuration.md (add a row to a key table, full dotted path):\n  ${missing.join('\n  ')}`).toEqual([])
  })

  it('documents no key the schema does not have', () => {
    const extra = [...explicit].filter(([key]) => !schema.has(key)).map(([key, line]) => `${key} (line ${line})`).sort()
    expect(extra, `keys documented in docs/configuration.md that src/config/schema.ts does not have:\n  ${extra.join('\n  ')}`).toEqual([])
  })
})
