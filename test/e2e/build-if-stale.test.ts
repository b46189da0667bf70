/**
 * `npm start` builds only when sources changed (scripts/build-if-stale.mjs): on a copy of the sources, the first
 * run compiles, a second one finds dist/ up to date and compiles nothing, and a changed source (or tsconfig)
 * builds again. A test file under src/ changes nothing.
 */
import { spawnSync } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

const repo = path.resolve(new URL('../..', import.meta.url).pathname)
const root = mkdtempSync(path.join(tmpdir(), 'portcullis-build-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
for (const item of ['src', 'scripts', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json']) {
  cpSync(path.join(repo, item), path.join(root, item), { recursive: true })
}
symlinkSync(path.join(repo, 'node_modules'), path.join(root, 'node_modules'))

function run(): string {
  const result = spawnSync(process.execPath, [path.join(root, 'scripts/build-if-stale.mjs'), root], { encoding: 'utf8' })
  expect(result.status, result.stderr + result.stdout).toBe(0)
  return result.stderr.trim()
}
/** Marks a file changed now. */
const touch = (file: string) => { const now = new Date(); utimesSync(path.join(root, file), now, now) }

describe('npm start builds only when sources changed', () => {
  it('compiles once, then starts on the built output until a source, test files aside, or a tsconfig changes', () => {
    expect(JSON.parse(readFileSync(path.join(repo, 'package.json'), 'utf8')).scripts.start).toMatch(/^node scripts\/build-if-stale\.mjs && node /)
    expect(run()).toBe('dist/ built')
    const cli = statSync(path.join(root, 'dist/cli.js')).mtimeMs
    expect(run()).toBe('dist/ is up to date')
    expect(statSync(path.join(root, 'dist/cli.js')).mtimeMs).toBe(cli)
    touch('src/server/young-generation.test.ts')
    expect(run()).toBe('dist/ is up to date')
    touch('src/cli.ts')
    expect(run()).toBe('dist/ built')
    expect(run()).toBe('dist/ is up to date')
    touch('tsconfig.build.json')
    expect(run()).toBe('dist/ built')
  }, 120_000)
})
