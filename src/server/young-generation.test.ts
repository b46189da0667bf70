import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { YOUNG_GENERATION_FLAG, setsSemiSpace, workerExecArgv, youngGenerationArgs, youngGenerationPays } from './young-generation.js'

describe('the young generation size of a gateway process', () => {
  it('is added to the workers’ node arguments, after the primary’s own, on node 20', () => {
    expect(workerExecArgv([], undefined, 'v20.20.2')).toEqual([YOUNG_GENERATION_FLAG])
    expect(workerExecArgv(['--enable-source-maps'], '--trace-warnings', 'v20.0.0')).toEqual(['--enable-source-maps', YOUNG_GENERATION_FLAG])
  })

  it('is not given on the nodes where it measured no gain (22, 24, 26) or was not measured, nor for a version it cannot read', () => {
    for (const version of ['v22.23.3', 'v24.21.0', 'v26.10.0', 'v200.0.0', 'v2.0.0', 'nonsense', '']) {
      expect(youngGenerationPays(version)).toBe(false)
      expect(youngGenerationArgs([], undefined, version)).toEqual([])
      expect(workerExecArgv(['--enable-source-maps'], undefined, version)).toEqual(['--enable-source-maps'])
    }
  })

  it('leaves an operator’s own semi-space size alone, on the command line or in NODE_OPTIONS, in every spelling node takes', () => {
    for (const [argv, options] of [
      [['--max-semi-space-size=16'], undefined],
      [['--max_semi_space_size=128'], undefined],
      [[], '--max-semi-space-size=32'],
      [[], '--inspect --max-semi-space-size 32'],
      [[], '--max_semi_space_size=8 --trace-gc'],
    ] as const) {
      expect(setsSemiSpace(argv, options)).toBe(true)
      expect(workerExecArgv(argv, options, 'v20.20.2')).toEqual(argv)
    }
  })

  it('is not fooled by other flags that merely start or end alike', () => {
    for (const [argv, options] of [
      [['--max-semi-space-sizes=1'], undefined],
      [['--min-semi-space-size=64'], undefined],
      [['--no-max-semi-space-size-x'], undefined],
      [[], '--max-old-space-size=512'],
      [[], 'max-semi-space-size=64'],
      [[], ''],
    ] as const) {
      expect(setsSemiSpace(argv, options)).toBe(false)
    }
  })

  it('takes effect: a node started with it grows its new space past its own default; set later with setFlagsFromString, it does not', () => {
    const script = `
      if (process.argv[1] === 'late') require('v8').setFlagsFromString('${YOUNG_GENERATION_FLAG}')
      const v8 = require('v8'); const keep = []; let max = 0
      for (let i = 0; i < 4000; i++) {
        keep.push(Array.from({ length: 2000 }, (_, j) => ({ j, s: 'x' + j }))); if (keep.length > 300) keep.shift()
        max = Math.max(max, v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size)
      }
      console.log(max)`
    // Without the caller's NODE_OPTIONS: node's own default is the reference (16 MB semi-spaces on node 20, 32 on node 26).
    const grown = (args: string[], mode: string) =>
      Number(spawnSync(process.execPath, [...args, '-e', script, mode], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } }).stdout)
    const own = grown([], 'default')
    const flagged = grown([YOUNG_GENERATION_FLAG], 'flag')
    const late = grown([], 'late')
    expect(own).toBeGreaterThan(0)
    // Node's growth is not exact (node 26 reached 67–76 MB on its own, 134 MB with the flag; node 20 34 and 134 MB).
    expect(flagged).toBeGreaterThan(own * 1.5)
    expect(late).toBeLessThan(flagged * 0.75)
  })
})

describe('`npm start`', () => {
  it('starts the gateway with the young generation size', () => {
    const scripts = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts
    expect(scripts.start).toContain(`node ${YOUNG_GENERATION_FLAG} dist/cli.js start`)
  })
})
