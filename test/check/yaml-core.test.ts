/**
 * The core schema's scalar resolution the quick parser uses (src/check/yaml-core.ts) against `yaml`'s own core schema
 * tags, scalar by scalar: every string of up to three characters over the characters the forms are made of, and the
 * spellings the YAML 1.2 spec and YAML 1.1 part on. Either both read a string, or both the same value.
 */
import { describe, expect, it } from 'vitest'
import { Schema, isScalar } from 'yaml'
import { CORE_FIRST_CHARS, NOT_CORE, resolveCore } from '../../src/check/yaml-core.js'

/** `yaml`'s reading of a plain scalar under its core schema: the first tag whose test matches, else a string. */
function yamlReads(source: string): unknown {
  for (const tag of new Schema({ schema: 'core' }).tags) {
    if (!('test' in tag) || tag.test === undefined || tag.resolve === undefined || !tag.test.test(source)) continue
    const resolved: unknown = tag.resolve(source, (message) => { throw new Error(message) }, { intAsBigInt: false } as never)
    return isScalar(resolved) ? resolved.value : resolved
  }
  return NOT_CORE
}

const ALPHABET = [...'~nNtTfFrueasl+-.0123456789oxXeEiIaAbB_: ']
const SHORT = ['']
for (let length = 1; length <= 3; length++) {
  for (const prefix of SHORT.filter((text) => text.length === length - 1)) for (const char of ALPHABET) SHORT.push(prefix + char)
}
const NOTABLE = [
  'null', 'Null', 'NULL', 'nULL', '~', 'true', 'True', 'TRUE', 'tRUE', 'false', 'False', 'FALSE', 'yes', 'no', 'on', 'off', 'y', 'n',
  '.inf', '.Inf', '.INF', '-.inf', '+.inf', '.iNF', '.nan', '.NaN', '.NAN', '-.nan', '0o17', '0o18', '0O17', '-0o7', '0x1F', '0X1F',
  '0xg', '-0x1', '1_000', '0b101', '012', '+12', '-0', '1.', '.5', '1.5e3', '1e3', '1E-3', '+.5e+2', '1.e5', '.e5', '1e', '1:30',
  '12:30:00', '2001-12-14', '1.0.0', '9007199254740993', '1e400', `1${'0'.repeat(400)}`, '0.1e-400', '- 1', ' 1', '1 ',
]

describe('the core schema as the quick parser resolves it', () => {
  it('reads every short scalar and every notable spelling as yaml does', () => {
    const differ: string[] = []
    for (const source of [...SHORT, ...NOTABLE]) {
      const ours = resolveCore(source)
      const theirs = yamlReads(source)
      if (!Object.is(ours, theirs)) differ.push(`${JSON.stringify(source)}: ours ${String(ours)}, yaml ${String(theirs)}`)
    }
    expect(SHORT.length).toBeGreaterThan(50_000)
    expect(differ).toEqual([])
  })

  it('never skips a scalar yaml reads as other than a string by its first character', () => {
    const firsts = new Set([...CORE_FIRST_CHARS.values()].flat())
    const resolvedFirsts = new Set([...SHORT, ...NOTABLE].filter((source) => yamlReads(source) !== NOT_CORE).map((source) => source.charAt(0)))
    expect([...resolvedFirsts].filter((first) => !firsts.has(first))).toEqual([])
    expect(resolvedFirsts.size).toBeGreaterThan(10)
  })
})
