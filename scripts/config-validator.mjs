#!/usr/bin/env node
// Writes the config schema's validator as code (ajv's standalone code) and the schema as JSON, so that
// `portcullis check` and a reload's loader thread load the validator instead of compiling the schema, and no process
// with this build loads TypeBox to build the schema (src/check/config-validator.ts). Run by
// scripts/build-if-stale.mjs after the compile, from the compiled dist/; each file carries the fingerprint of the
// schema's modules it was made from, and one whose fingerprint is not the build's is never used. Then the validator's
// V8 code cache (src/check/code-cache.ts), made with the flags the CLI runs with (raise-inlining-budget.js, which the
// CLI imports before anything else is compiled), after validating the configs under config/.
//
//   node scripts/config-validator.mjs [ROOT]      (default ROOT: this checkout)
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import standalone from 'ajv/dist/standalone/index.js'
import { parse } from 'yaml'

const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'))
const dir = path.join(root, 'dist', 'check')
// The files of an earlier build go first: the module below must build the schema itself, not read an older one.
rmSync(path.join(dir, 'config-schema.json'), { force: true })
rmSync(path.join(dir, 'config-validator.cjs'), { force: true })
rmSync(path.join(dir, 'config-validator.cjs.v8-cache'), { force: true })
const { configAjv, schemaFingerprint, PRECOMPILED_FILE, SCHEMA_FILE } = await import(pathToFileURL(path.join(dir, 'config-validator.js')).href)
const { GatewayConfigSchema } = await import(pathToFileURL(path.join(root, 'dist', 'config', 'schema.js')).href)
const ajv = configAjv({ code: { source: true } })
const code = standalone.default(ajv, ajv.compile(GatewayConfigSchema))
const fingerprint = schemaFingerprint()
writeFileSync(path.join(dir, PRECOMPILED_FILE), `${code}\nmodule.exports.fingerprint = ${JSON.stringify(fingerprint)};\n`)
writeFileSync(path.join(dir, SCHEMA_FILE), JSON.stringify({ fingerprint, schema: GatewayConfigSchema }))

// The code cache, with the CLI's flags: V8 refuses a cache made with other flags.
await import(pathToFileURL(path.join(root, 'dist', 'server', 'raise-inlining-budget.js')).href)
const { writeValidatorCodeCache } = await import(pathToFileURL(path.join(dir, 'config-validator.js')).href)
const configDir = path.join(root, 'config')
const samples = existsSync(configDir)
  ? readdirSync(configDir).filter((file) => file.endsWith('.yaml')).map((file) => parse(readFileSync(path.join(configDir, file), 'utf8')))
  : []
writeValidatorCodeCache([{ upstreams: { echo: { url: 'builtin:echo' } }, routes: [{ id: 'all', path: '/**', upstream: 'echo' }] }, ...samples])
