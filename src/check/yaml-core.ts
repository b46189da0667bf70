/**
 * The YAML 1.2 core schema's plain-scalar resolution (YAML 1.2.2 §10.3.2, "Tag Resolution"), written as `yaml` writes
 * it (its `core` schema: the same tests, tried in the same order, the same values), so that the quick parser
 * (yaml-quick.ts) reads a plain scalar as `yaml` does without loading `yaml` (72 modules, 30-45 ms of a
 * `portcullis check`). test/check/yaml-core.test.ts holds it to `yaml`'s own tags scalar by scalar.
 *
 * Every scalar the core schema resolves to something other than a string starts with one of `~nNtTfF+-.0-9` or is
 * empty (§10.3.2's regular expressions): {@link CORE_FIRST_CHARS}, by which js-yaml skips the rest.
 */

/** Not one of the core schema's null, bool, int or float forms: the scalar is a string. */
export const NOT_CORE: unique symbol = Symbol('not a core schema scalar')

interface CoreTest { readonly test: RegExp; readonly resolve: (source: string) => null | boolean | number }

/** By tag, each form in `yaml`'s order of trying them (null, bool, int: octal, decimal, hex; float: NaN and infinities, exponent, fraction). */
export const CORE_TAGS: ReadonlyMap<string, readonly CoreTest[]> = new Map<string, readonly CoreTest[]>([
  ['tag:yaml.org,2002:null', [{ test: /^(?:~|[Nn]ull|NULL)?$/, resolve: () => null }]],
  ['tag:yaml.org,2002:bool', [{ test: /^(?:[Tt]rue|TRUE|[Ff]alse|FALSE)$/, resolve: (source) => source[0] === 't' || source[0] === 'T' }]],
  ['tag:yaml.org,2002:int', [
    { test: /^0o[0-7]+$/, resolve: (source) => parseInt(source.substring(2), 8) },
    { test: /^[-+]?[0-9]+$/, resolve: (source) => parseInt(source, 10) },
    { test: /^0x[0-9a-fA-F]+$/, resolve: (source) => parseInt(source.substring(2), 16) },
  ]],
  ['tag:yaml.org,2002:float', [
    {
      test: /^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/,
      resolve: (source) => (source.slice(-3).toLowerCase() === 'nan' ? NaN : source[0] === '-' ? -Infinity : Infinity),
    },
    { test: /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/, resolve: (source) => parseFloat(source) },
    { test: /^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/, resolve: (source) => parseFloat(source) },
  ]],
])

/** The first characters each tag's forms can start with ('' for the empty scalar, a null). */
export const CORE_FIRST_CHARS: ReadonlyMap<string, readonly string[]> = new Map([
  ['tag:yaml.org,2002:null', ['', '~', 'n', 'N']],
  ['tag:yaml.org,2002:bool', ['t', 'T', 'f', 'F']],
  ['tag:yaml.org,2002:int', ['+', '-', ...'0123456789']],
  ['tag:yaml.org,2002:float', ['+', '-', '.', ...'0123456789']],
])

const ALL_FIRST_CHARS = new Set([...CORE_FIRST_CHARS.values()].flat())
const ALL_TESTS = [...CORE_TAGS.values()].flat()

/** A plain scalar's value under the core schema, or {@link NOT_CORE} where it is a string. */
export function resolveCore(source: string): null | boolean | number | typeof NOT_CORE {
  if (!ALL_FIRST_CHARS.has(source.charAt(0))) return NOT_CORE
  for (const { test, resolve } of ALL_TESTS) if (test.test(source)) return resolve(source)
  return NOT_CORE
}
