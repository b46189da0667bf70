/**
 * The config schema's validator written by the build (scripts/config-validator.mjs): the built loader takes it
 * instead of compiling the schema, it judges every config as the compiled one does, and a written validator of
 * another schema is never taken. With the schema written too, a built process does not load TypeBox to build it.
 * The validator's V8 code cache (src/check/code-cache.ts) is taken by a process with the CLI's flags, refused without
 * harm by one with others, and never given to V8 for a validator of other text.
 */
import { execFileSync } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import type * as Validator from '../../src/check/config-validator.js'

const DIST = path.resolve('dist')
const WRITTEN = path.join(DIST, 'check', 'config-validator.cjs')

/** The build's modules, as production loads them; a missing or stale build fails the test (run `npm run build`). */
async function built(root = DIST): Promise<{ validator: typeof Validator }> {
  for (const source of ['src/config/schema.ts', 'src/check/config-validator.ts']) {
    if (root === DIST && (!existsSync(WRITTEN) || statSync(WRITTEN).mtimeMs < statSync(source).mtimeMs)) {
      throw new Error(`${WRITTEN} is missing or older than ${source}: run \`npm run build\` first`)
    }
  }
  const validator = await import(pathToFileURL(path.join(root, 'check', 'config-validator.js')).href) as typeof Validator
  return { validator }
}

const BAD: unknown[] = [
  {},
  { routes: 'all of them' },
  { upstreams: { api: { url: 5 } }, routes: [{ id: 1, path: 3, upstream: 'api', scopes: 'read' }], unknown_key: true },
  { server: { listen: 8080, admission: { max_in_flight: -1 } }, upstreams: {}, routes: [] },
  { upstreams: { api: { url: 'http://127.0.0.1:1' } }, routes: [{ id: 'a', path: '/a', upstream: 'api', auth: 'sometimes' }] },
]

describe('the written config validator', () => {
  it('is what the built loader takes, made from this schema, and judges every config as the compiled validator does, error for error', async () => {
    const { validator } = await built()
    const written = validator.configValidator() as ReturnType<typeof validator.configValidator> & { fingerprint?: string }
    expect(written.fingerprint).toBe(validator.schemaFingerprint())
    // What a serving process's event loop asks for (LoadOptions.writtenValidator: false): compiled, not the written one.
    const compiled = validator.configValidator(false) as ReturnType<typeof validator.configValidator> & { fingerprint?: string }
    expect(compiled.fingerprint).toBeUndefined()
    const shipped = parse(readFileSync('config/portcullis.yaml', 'utf8')) as unknown
    expect(written(shipped)).toBe(true)
    expect(compiled(shipped)).toBe(true)
    for (const config of BAD) {
      expect(written(config)).toBe(false)
      expect(compiled(config)).toBe(false)
      // verbose: each error carries its schema and parentSchema (the x-message), compared in full but for TypeBox's
      // symbol keys, which the written schema has not and nothing reads (schema-issues.ts reads string keys)
      expect(JSON.parse(JSON.stringify(written.errors))).toEqual(JSON.parse(JSON.stringify(compiled.errors)))
      expect(written.errors!.length).toBeGreaterThan(0)
    }
  })

  it('is never taken when it was made from another schema: the loader compiles this one instead', async () => {
    // A copy of the build whose written validator accepts anything: taken only with this schema's fingerprint.
    const root = mkdtempSync(path.join(tmpdir(), 'portcullis-validator-'))
    symlinkSync(path.resolve('node_modules'), path.join(root, 'node_modules'))
    cpSync(DIST, path.join(root, 'dist'), { recursive: true, filter: (file) => !file.endsWith('.map') })
    const { validator: original } = await built()
    const acceptsAll = (fingerprint: string) =>
      `module.exports = function validate() { return true }\nmodule.exports.fingerprint = ${JSON.stringify(fingerprint)}\n`

    writeFileSync(path.join(root, 'dist', 'check', 'config-validator.cjs'), acceptsAll('0'.repeat(64)))
    const { validator: stale } = await built(path.join(root, 'dist'))
    expect(stale.configValidator()({ routes: 'all of them' })).toBe(false)

    // The same copy with this schema's fingerprint is taken (so the test above can fail): a fresh module instance.
    const again = path.join(root, 'again')
    cpSync(path.join(root, 'dist'), again, { recursive: true })
    writeFileSync(path.join(again, 'check', 'config-validator.cjs'), acceptsAll(original.schemaFingerprint()))
    const { validator: matching } = await built(again)
    expect(matching.configValidator()({ routes: 'all of them' })).toBe(true)
  })

  it('with the schema written for this build, a built loader never loads TypeBox; with another build\'s, it builds the schema', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-typebox-'))
    const log = path.join(dir, 'resolved.txt')
    // A module hook that writes down every module the process resolves.
    writeFileSync(path.join(dir, 'hooks.mjs'), `import { appendFileSync } from 'node:fs'
export async function resolve(specifier, context, next) { const found = await next(specifier, context); appendFileSync(${JSON.stringify(log)}, found.url + '\\n'); return found }`)
    writeFileSync(path.join(dir, 'register.mjs'), `import { register } from 'node:module'\nregister(${JSON.stringify(pathToFileURL(path.join(dir, 'hooks.mjs')).href)})`)
    const resolvedBy = (root: string) => {
      writeFileSync(log, '')
      const load = pathToFileURL(path.join(root, 'check', 'load.js')).href
      execFileSync(process.execPath, ['--import', pathToFileURL(path.join(dir, 'register.mjs')).href, '--input-type=module', '-e',
        `const { loadConfig } = await import(${JSON.stringify(load)}); loadConfig('x.yaml', 'upstreams: {a: {url: "http://127.0.0.1:1"}}\\nroutes: [{id: a, path: /a, upstream: a, auth: none}]\\n', {})`])
      return readFileSync(log, 'utf8').split('\n')
    }
    await built()
    const own = resolvedBy(DIST)
    expect(own.some((url) => url.endsWith('/check/load.js'))).toBe(true)
    expect(own.filter((url) => url.includes('typebox'))).toEqual([])

    // A copy of the build whose written schema carries another fingerprint: the schema is built, TypeBox loaded.
    const root = mkdtempSync(path.join(tmpdir(), 'portcullis-schema-'))
    symlinkSync(path.resolve('node_modules'), path.join(root, 'node_modules'))
    cpSync(DIST, path.join(root, 'dist'), { recursive: true, filter: (file) => !file.endsWith('.map') })
    const schemaFile = path.join(root, 'dist', 'check', 'config-schema.json')
    writeFileSync(schemaFile, JSON.stringify({ ...JSON.parse(readFileSync(schemaFile, 'utf8')) as object, fingerprint: '0'.repeat(64) }))
    expect(resolvedBy(path.join(root, 'dist')).some((url) => url.includes('typebox'))).toBe(true)
  }, 30_000)

  /** In a new process, as the CLI loads it (its flags set first): whether V8 took the code cache, and the verdicts on the shipped config and a bad one. */
  function cacheUse(root: string, nodeArgs: string[] = []): { cache: string; shipped: boolean; bad: boolean } {
    const at = (file: string) => JSON.stringify(pathToFileURL(path.join(root, file)).href)
    const shipped = JSON.stringify(parse(readFileSync('config/portcullis.yaml', 'utf8')))
    const out = execFileSync(process.execPath, [...nodeArgs, '--input-type=module', '-e', `
      await import(${at('server/tick-shape.js')}); await import(${at('server/raise-inlining-budget.js')})
      const validator = await import(${at('check/config-validator.js')})
      const validate = validator.configValidator()
      console.log(JSON.stringify({ cache: validator.writtenValidatorCache(), shipped: validate(${shipped}), bad: validate({ routes: 'all of them' }) }))`],
    // No NODE_OPTIONS of the environment: V8 flags there (--max-old-space-size) are flags the cache was not made with.
    { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } })
    return JSON.parse(out) as { cache: string; shipped: boolean; bad: boolean }
  }

  it('comes with a V8 code cache the CLI\'s process takes; a process with other flags refuses it and validates all the same', async () => {
    await built()
    expect(existsSync(`${WRITTEN}.v8-cache`)).toBe(true)
    expect(cacheUse(DIST)).toEqual({ cache: 'taken', shipped: true, bad: false })
    expect(cacheUse(DIST, ['--max-semi-space-size=64'])).toEqual({ cache: 'refused', shipped: true, bad: false })
  }, 30_000)

  it('never gives V8 the code cache of other text, and a damaged cache is refused, not run', async () => {
    const { validator: original } = await built()
    const root = mkdtempSync(path.join(tmpdir(), 'portcullis-code-cache-'))
    symlinkSync(path.resolve('node_modules'), path.join(root, 'node_modules'))
    cpSync(DIST, path.join(root, 'dist'), { recursive: true, filter: (file) => !file.endsWith('.map') })
    const copy = path.join(root, 'dist')
    const written = path.join(copy, 'check', 'config-validator.cjs')
    // Other code of this schema's fingerprint beside the real validator's cache: the cache is not this text's, so not used.
    const original_ = readFileSync(written, 'utf8')
    writeFileSync(written, `module.exports = function validate() { return true }\nmodule.exports.fingerprint = ${JSON.stringify(original.schemaFingerprint())}\n`)
    expect(cacheUse(copy)).toEqual({ cache: 'none', shipped: true, bad: true })
    // The real validator again, its cache's data damaged past the digest: V8 refuses it, and the text is compiled.
    writeFileSync(written, original_)
    const cache = readFileSync(`${written}.v8-cache`)
    for (let at = 64; at < cache.length; at += 97) cache[at] = (cache[at]! + 1) & 0xff
    writeFileSync(`${written}.v8-cache`, cache)
    expect(cacheUse(copy)).toEqual({ cache: 'refused', shipped: true, bad: false })
  }, 30_000)

  it('a quick-read file with no CORS pattern is checked without loading yaml or tldts', async () => {
    await built()
    const load = JSON.stringify(pathToFileURL(path.join(DIST, 'check', 'load.js')).href)
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
      import { createRequire } from 'node:module'
      const { loadConfig } = await import(${load})
      const loaded = () => Object.keys(createRequire(import.meta.url).cache).filter((file) => /node_modules.(yaml|tldts)./.test(file)).length
      loadConfig('x.yaml', 'upstreams: {a: {url: "http://127.0.0.1:1"}}\\nroutes: [{id: a, path: /a, upstream: a, auth: none}]\\n', {})
      const quick = loaded()
      try { loadConfig('x.yaml', 'upstreams: {a: {url: "http://127.0.0.1:1"}}\\nroutes: [{id: a, path: /a, upstream: nowhere, auth: none}]\\n', {}) } catch {}
      console.log(JSON.stringify({ quick, placed: loaded() }))`], { encoding: 'utf8' })
    // A problem to place loads yaml (so the count above can be other than zero).
    const { quick, placed } = JSON.parse(out) as { quick: number; placed: number }
    expect(quick).toBe(0)
    expect(placed).toBeGreaterThan(0)
  }, 30_000)
})
