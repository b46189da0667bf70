#!/usr/bin/env node
// Builds dist/ (tsc -p tsconfig.build.json) only when it is stale: when a file under src/ (tests excluded), a
// tsconfig or package-lock.json is newer than the last build's stamp, or dist/cli.js is missing. `npm start` runs
// it, so a start after no change costs a directory walk, not a compile (about 7 s here). `npm run build` runs it
// with --always.
//
//   node scripts/build-if-stale.mjs [--always] [ROOT]      (default ROOT: this checkout)
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const args = process.argv.slice(2)
const always = args.includes('--always')
const root = path.resolve(args.find((arg) => arg !== '--always') ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'))
const stamp = path.join(root, 'dist', '.build-stamp')

/** The newest modification time of the build's inputs. */
function newestInput() {
  let newest = 0
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(file)
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts')) newest = Math.max(newest, statSync(file).mtimeMs)
    }
  }
  walk(path.join(root, 'src'))
  for (const file of ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json']) {
    const at = path.join(root, file)
    if (existsSync(at)) newest = Math.max(newest, statSync(at).mtimeMs)
  }
  return newest
}

const built = existsSync(stamp) && existsSync(path.join(root, 'dist', 'cli.js')) ? statSync(stamp).mtimeMs : -1
if (!always && built >= newestInput()) {
  console.error('dist/ is up to date')
  process.exit(0)
}
// The stamp carries the time the compile started: a source saved during it is newer, and builds next time.
const started = new Date()
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc')
const run = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' })
if (run.status !== 0) process.exit(run.status ?? 1)
// The config schema's validator as code, so that a reload's loader does not compile it (src/check/config-validator.ts).
const validator = spawnSync(process.execPath, [path.join(root, 'scripts', 'config-validator.mjs'), root], { cwd: root, stdio: 'inherit' })
if (validator.status !== 0) process.exit(validator.status ?? 1)
writeFileSync(stamp, `${started.toISOString()}\n`)
utimesSync(stamp, started, started)
if (!always) console.error('dist/ built')
