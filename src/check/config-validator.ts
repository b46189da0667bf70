/**
 * The config schema's validator (ajv). Compiling the schema takes about a third of a second (ajv generates and
 * evaluates some 900 KB of code), paid by every `portcullis check` and every hot reload's loader thread (a serving
 * event loop compiles its own: LoadOptions.writtenValidator in load.ts; docs/performance.md, routes). The build
 * writes that code once (scripts/config-validator.mjs, ajv's standalone code, beside this module as
 * config-validator.cjs) and the schema as JSON (config-schema.json), each with the fingerprint of the schema's
 * modules it was made from. {@link configValidator} takes the written validator when its fingerprint is this
 * build's, and compiles otherwise (run from the TypeScript sources, or a build whose schema changed without the
 * step: never a validator of another schema). With the written schema, the schema is not built at all: TypeBox,
 * which builds it, takes about a tenth of a second to load.
 */
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Ajv, Options, ValidateFunction } from 'ajv'
import type { GatewayConfig } from '../config/schema.js'
import { requireWithCodeCache, type CachedModule, type CodeCacheUse } from './code-cache.js'

const requireHere = createRequire(import.meta.url)

/** The written validator and schema, beside the compiled form of this module. */
export const PRECOMPILED_FILE = './config-validator.cjs'
export const SCHEMA_FILE = './config-schema.json'

/**
 * The options both ways share. `verbose` gives each error its `parentSchema`, where the schema's `x-message` lives.
 */
export function configAjv(extra: Options = {}): Ajv {
  // Loaded here, not imported: with the written validator ajv's compiler (some 60 modules) is not loaded at all.
  const { Ajv: Compiler } = requireHere('ajv') as typeof import('ajv')
  const ajv = new Compiler({ allErrors: true, verbose: true, strict: false, allowUnionTypes: true, ...extra })
  ajv.addKeyword({ keyword: 'x-message', schemaType: 'string' })
  return ajv
}

let fingerprint: string | undefined

/**
 * What identifies the schema without building it: the SHA-256 of the modules it is built from (every compiled
 * module under config/, by its path there, and the TypeBox version that builds it). About a millisecond.
 */
export function schemaFingerprint(): string {
  if (fingerprint !== undefined) return fingerprint
  const configDir = fileURLToPath(new URL('../config/', import.meta.url))
  const typeboxMain = requireHere.resolve('@sinclair/typebox')
  const typebox = readFileSync(path.join(typeboxMain.slice(0, typeboxMain.lastIndexOf(`${path.sep}build${path.sep}`)), 'package.json'))
  const hash = createHash('sha256').update(typebox)
  const files = readdirSync(configDir, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.js')).sort()
  for (const file of files) hash.update(`\0${file}\0`).update(readFileSync(path.join(configDir, file)))
  return (fingerprint = hash.digest('hex'))
}

/** A written file's export when its fingerprint is this build's. */
function writtenFor<T extends { fingerprint?: unknown }>(file: string, load = (at: string) => requireHere(at) as T): T | undefined {
  try {
    const written = load(file)
    return written.fingerprint === schemaFingerprint() ? written : undefined
  } catch {
    return undefined
  }
}

/** The written validator's module, run with its code cache (code-cache.ts). */
function loadWrittenValidator(): CachedModule {
  return requireWithCodeCache(fileURLToPath(new URL(PRECOMPILED_FILE, import.meta.url)))
}

/** The schema as JSON Schema: the written one when it is this build's, else built by TypeBox (loaded only then). */
const schema: object = writtenFor<{ fingerprint?: unknown; schema: object }>(SCHEMA_FILE)?.schema
  ?? (await import('../config/schema.js')).GatewayConfigSchema

/** This thread's compiled validator: compiled once, whichever way it was asked for. */
let compiled: ValidateFunction<GatewayConfig> | undefined
/** This thread's written validator, looked up on first use (null: none for this schema). */
let written: ValidateFunction<GatewayConfig> | null | undefined
/** Whether V8 took the written validator's code cache (undefined: not loaded). */
let writtenCache: CodeCacheUse | undefined

/**
 * The written validator when there is one for this very schema (and `takeWritten` allows it), else the compiled
 * one (the same for both ways of asking: a thread without a written validator never compiles the schema twice).
 */
export function configValidator(takeWritten = true): ValidateFunction<GatewayConfig> {
  if (takeWritten && written === undefined) {
    const found = writtenFor<ValidateFunction<GatewayConfig> & { fingerprint?: unknown }>(PRECOMPILED_FILE, () => {
      const loaded = loadWrittenValidator()
      writtenCache = loaded.cache
      return loaded.exports as ValidateFunction<GatewayConfig> & { fingerprint?: unknown }
    })
    written = typeof found === 'function' ? found : null
  }
  return (takeWritten ? written : undefined) ?? (compiled ??= configAjv().compile<GatewayConfig>(schema))
}

/** Whether this thread's written validator came with its code cache taken by V8 (undefined: none loaded). */
export function writtenValidatorCache(): CodeCacheUse | undefined {
  return writtenCache
}

/**
 * Writes the written validator's code cache (the build, with the flags the CLI runs with: scripts/config-validator.mjs),
 * after validating `samples` so that what they reach is compiled and in it.
 */
export function writeValidatorCodeCache(samples: readonly unknown[]): void {
  const loaded = loadWrittenValidator()
  const validate = loaded.exports as ValidateFunction<GatewayConfig>
  for (const sample of samples) validate(sample)
  loaded.writeCache()
}
