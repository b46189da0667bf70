import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { INLINING_FLAG, inliningPays, raiseInliningBudget, setsInliningBudget } from './inlining-budget.js'

const root = path.resolve(import.meta.dirname, '../..')

/**
 * How many of twelve mid-sized callees (169 bytes of bytecode each, about 2000 in all) TurboFan inlines into their
 * hot caller in a fresh node with `args`, after importing the CLI's module that raises the budget (dist/), as V8's
 * own inlining trace reports it.
 */
function inlinedCallees(args: string[]): number {
  const callees = Array.from({ length: 12 }, (_, k) =>
    `function f${k}(a){let s=0;for(let i=0;i<a.length;i++){s+=a.charCodeAt(i)*${k + 1};if(s>1e9)s%=97;s^=i<<${k % 5}}` +
    `return s+a.length*${k}+(a.indexOf('x')>0?1:2)+(a.length>3?a.charCodeAt(1):0)+(a.endsWith('z')?3:4)}`)
  const script = `
    await import(${JSON.stringify(pathToFileURL(path.join(root, 'dist/server/raise-inlining-budget.js')).href)});
    ${callees.join('\n')}
    function caller(a){return ${callees.map((_, k) => `f${k}(a)`).join('+')}}
    let t = 0;
    for (let i = 0; i < 200000; i++) t += caller('abc' + (i & 7));
    if (t === 0) console.error('unreachable');
  `
  const result = spawnSync(process.execPath, [...args, '--trace-turbo-inlining', '--input-type=module', '-e', script], {
    encoding: 'utf8', timeout: 30_000, maxBuffer: 1 << 26, env: { ...process.env, NODE_OPTIONS: '' },
  })
  expect(result.stderr).toBe('')
  const inlined = new Set<string>()
  for (const found of result.stdout.matchAll(/Inlining .*?<SharedFunctionInfo (f\d+)>\} into /g)) inlined.add(found[1]!)
  return inlined.size
}

describe("V8's inlining budget of a gateway process", () => {
  it('is raised on node 20, 24 and 26, where it measured a gain, and on no other node or unreadable version', () => {
    for (const version of ['v20.20.2', 'v20.0.0', 'v24.21.0', 'v26.10.0']) expect(inliningPays(version), version).toBe(true)
    for (const version of ['v22.23.3', 'v18.20.0', 'v200.0.0', 'v2.0.0', 'v2', 'nonsense', '']) {
      expect(inliningPays(version), version).toBe(false)
      expect(raiseInliningBudget([], undefined, version), version).toBe(false)
    }
  })

  it('leaves an operator’s own budget alone, on the command line or in NODE_OPTIONS, in every spelling node takes', () => {
    for (const [argv, options] of [
      [['--max-inlined-bytecode-size-cumulative=920'], undefined],
      [['--max_inlined_bytecode_size_cumulative=100'], undefined],
      [[], '--max-inlined-bytecode-size-cumulative=500'],
      [[], '--inspect --max-inlined-bytecode-size-cumulative 500'],
      [[], '--max_inlined_bytecode_size_cumulative=8 --trace-gc'],
    ] as const) {
      expect(setsInliningBudget(argv, options)).toBe(true)
      expect(raiseInliningBudget(argv, options, 'v20.20.2')).toBe(false)
    }
  })

  it('does not take a look-alike for the operator’s own budget', () => {
    for (const arg of ['--max-inlined-bytecode-size=500', '--max-inlined-bytecode-size-absolute=1', '--max-inlined-bytecode-size-cumulatives=1',
      '--no-max-inlined-bytecode-size-cumulative-x', 'max-inlined-bytecode-size-cumulative=1', '']) {
      expect(setsInliningBudget([arg], undefined), arg).toBe(false)
      expect(setsInliningBudget([], arg), arg).toBe(false)
    }
    expect(INLINING_FLAG).toMatch(/^--max-inlined-bytecode-size-cumulative=\d+$/)
  })

  it('changes what V8 inlines in a real node where it pays, and nothing where it does not or the operator set a budget', () => {
    const raised = inlinedCallees([])
    const ownDefault = inlinedCallees(['--max-inlined-bytecode-size-cumulative=920'])
    // node's own budget (920 bytes) takes about five of the twelve in one optimization (5 to 8 in all were seen, over
    // the caller's and the loop's own); the raised one (3000) takes all twelve.
    expect(ownDefault).toBeLessThan(12)
    if (inliningPays(process.version)) expect(raised).toBe(12)
    else expect(raised).toBeLessThan(12)
  })

  it('is raised by the CLI right after the tick object is kept, before the rest of the program loads', () => {
    const imports = readFileSync(path.join(root, 'src/cli.ts'), 'utf8').split('\n').filter((line) => line.startsWith('import '))
    expect(imports.slice(0, 2)).toEqual(["import './server/tick-shape.js'", "import './server/raise-inlining-budget.js'"])
  })
})
