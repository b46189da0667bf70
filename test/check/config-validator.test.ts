/**
 * The config schema's validator written by the build (scripts/config-validator.mjs): the built loader takes it
 * instead of compiling the schema, it judges every config as the compiled one does, and a written validator of
 * another schema is never taken. With the schema written too, a built process does not load TypeBox to build it.
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
})
