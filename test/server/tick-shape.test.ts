/**
 * Issue 24 item 2: one of Node's own nextTick objects kept alive (src/server/tick-shape.ts), so that a full
 * garbage collection cannot free the shapes V8 compiled nextTick against and send every later tick through
 * V8's runtime. What must hold: the object kept is a real tick object, and the ticks made after full
 * collections still have its shape (the one the compiled code expects).
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { keepTickShape } from '../../src/server/tick-shape.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

describe('keepTickShape', () => {
  it('keeps a real nextTick object, the same one on every call', () => {
    const kept = keepTickShape() as Record<string | symbol, unknown>
    expect(kept).toBeTypeOf('object')
    const symbols = Object.getOwnPropertySymbols(kept).map((symbol) => symbol.description)
    expect(symbols).toEqual(['async_id_symbol', 'trigger_async_id_symbol'])
    expect(kept.callback).toBeTypeOf('function')
    expect(Object.keys(kept)).toEqual(['callback', 'args'])
    expect(keepTickShape()).toBe(kept)
  })

  it('ticks made after full collections have the kept object\'s shape', () => {
    // A child process: natives syntax and gc() are flags of the process. It runs the built module (`npm test`
    // builds first), as the CLI does.
    const script = `
      import { createHook } from 'node:async_hooks';
      import { keepTickShape } from ${JSON.stringify(pathToFileURL(path.join(root, 'dist/server/tick-shape.js')).href)};
      const kept = keepTickShape();
      const ticks = () => new Promise((resolve) => { let n = 0; const f = () => (++n === 1000 ? resolve() : process.nextTick(f)); process.nextTick(f) });
      await ticks();
      for (let i = 0; i < 4; i++) { globalThis.gc(); await ticks() }
      let fresh;
      const hook = createHook({ init(_id, type, _trigger, resource) { if (type === 'TickObject') fresh ??= resource } }).enable();
      process.nextTick(() => {});
      hook.disable();
      console.log(JSON.stringify({ same: %HaveSameMap(kept, fresh), kept: typeof kept, fresh: typeof fresh }));
    `
    const result = spawnSync(process.execPath, ['--expose-gc', '--allow-natives-syntax', '--input-type=module', '-e', script], {
      encoding: 'utf8', timeout: 20_000, cwd: root, env: { ...process.env, NODE_OPTIONS: '' },
    })
    expect(result.stderr).toBe('')
    expect(JSON.parse(result.stdout.trim())).toEqual({ same: true, kept: 'object', fresh: 'object' })
  })

  it('is loaded by the CLI before anything else (the loading runs a full collection)', () => {
    const cli = readFileSync(path.join(root, 'src/cli.ts'), 'utf8')
    const firstImport = cli.split('\n').find((line) => line.startsWith('import '))
    expect(firstImport).toBe("import './server/tick-shape.js'")
  })
})
