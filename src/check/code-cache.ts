/**
 * A CommonJS file the build wrote, run with the V8 code cache the build wrote beside it (`FILE.v8-cache`): the config
 * schema's validator (config-validator.ts) is some 900 KB of generated code, which V8 parses when it is required and
 * compiles on its first call, 70-80 ms of every `portcullis check`; from the cache, 10-15 ms (docs/performance.md,
 * routes). Node 20 has no compile cache of its own (`module.enableCompileCache` came in node 22.1).
 *
 * V8 takes a cache only when its version and flags are the ones it was made with (the build makes it with the flags
 * the CLI runs with: scripts/config-validator.mjs) and refuses it otherwise, and the file is then compiled as
 * `require` would. V8 itself compares only the source's length, so the cache starts with the SHA-256 of the source it
 * was made from, and one made from other text is never given to V8.
 */
import { createHash } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import vm from 'node:vm'

export const CODE_CACHE_SUFFIX = '.v8-cache'

/** Whether the code cache was given to V8 and taken, refused (another V8 or other flags), or missing or not this source's. */
export type CodeCacheUse = 'taken' | 'refused' | 'none'

export interface CachedModule {
  readonly exports: unknown
  readonly cache: CodeCacheUse
  /** Writes the cache of what V8 has compiled of the file so far (run what should be in it first). */
  writeCache(): void
}

const DIGEST_LENGTH = 64

/** Requires `file` (a CommonJS module of the build), with its code cache where V8 takes it. */
export function requireWithCodeCache(file: string): CachedModule {
  const source = readFileSync(file, 'utf8')
  const digest = createHash('sha256').update(source).digest('hex')
  const cacheFile = `${file}${CODE_CACHE_SUFFIX}`
  let cachedData: Buffer | undefined
  try {
    const written = readFileSync(cacheFile)
    if (written.subarray(0, DIGEST_LENGTH).toString('latin1') === digest) cachedData = written.subarray(DIGEST_LENGTH)
  } catch {
    cachedData = undefined
  }
  // The wrapper `require` puts around a CommonJS module.
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename: file, cachedData })
  const cache: CodeCacheUse = cachedData === undefined ? 'none' : script.cachedDataRejected === true ? 'refused' : 'taken'
  const module = { exports: {} as unknown }
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void
  wrapper.call(module.exports, module.exports, createRequire(file), module, file, path.dirname(file))
  return {
    exports: module.exports,
    cache,
    writeCache: () => writeFileSync(cacheFile, Buffer.concat([Buffer.from(digest, 'latin1'), script.createCachedData()])),
  }
}
