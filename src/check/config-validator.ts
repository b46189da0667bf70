/**
 * The config schema's validator (ajv). Compiling the schema takes about a third of a second (ajv generates and
 * evaluates some 900 KB of code), paid by every `portcullis check` and every hot reload's loader thread (a serving
 * event loop compiles its own: LoadOptions.writtenValidator in load.ts; docs/performance.md, routes). The build
 * writes that code once (scripts/config-validator.mjs, ajv's standalone
 * code, beside this module as config-validator.cjs, with the fingerprint of the schema it was made from);
 * {@link configValidator} takes it when its fingerprint is the schema's, and compiles otherwise (run from the
 * TypeScript sources, or a build whose schema changed without the step: never a validator of another schema).
 */
import { createHash } from 'node:crypto'
import { createRequire } from 'node:module'
import type { Ajv, Options, ValidateFunction } from 'ajv'
import { GatewayConfigSchema, type GatewayConfig } from '../config/schema.js'

const requireHere = createRequire(import.meta.url)

/** The written validator, beside the compiled form of this module. */
export const PRECOMPILED_FILE = './config-validator.cjs'

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

/** What identifies the schema a written validator was made from: its JSON's SHA-256 (about 0.5 ms). */
export function schemaFingerprint(): string {
  return createHash('sha256').update(JSON.stringify(GatewayConfigSchema)).digest('hex')
}

type Precompiled = ValidateFunction<GatewayConfig> & { fingerprint?: unknown }

/** This thread's compiled validator: compiled once, whichever way it was asked for. */
let compiled: ValidateFunction<GatewayConfig> | undefined

/**
 * The written validator when there is one for this very schema (and `written` allows it), else the compiled one
 * (the same for both ways of asking: a thread without a written validator never compiles the schema twice).
 */
export function configValidator(written = true): ValidateFunction<GatewayConfig> {
  const taken = written ? writtenValidator() : undefined
  return taken ?? (compiled ??= configAjv().compile<GatewayConfig>(GatewayConfigSchema))
}

function writtenValidator(): ValidateFunction<GatewayConfig> | undefined {
  let written: Precompiled | undefined
  try {
    written = requireHere(PRECOMPILED_FILE) as Precompiled
  } catch {
    return undefined
  }
  return typeof written === 'function' && written.fingerprint === schemaFingerprint() ? written : undefined
}
