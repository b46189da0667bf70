#!/usr/bin/env node
// Writes the config schema's validator as code (ajv's standalone code), so that `portcullis check` and a reload's
// loader thread load it instead of compiling the schema (src/check/config-validator.ts). Run by
// scripts/build-if-stale.mjs after the compile, from the compiled dist/; the file carries the fingerprint of the
// schema it was made from, and a validator whose fingerprint is not the schema's is never used.
//
//   node scripts/config-validator.mjs [ROOT]      (default ROOT: this checkout)
import { writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import standalone from 'ajv/dist/standalone/index.js'

const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'))
const dir = path.join(root, 'dist', 'check')
const { configAjv, schemaFingerprint, PRECOMPILED_FILE } = await import(pathToFileURL(path.join(dir, 'config-validator.js')).href)
const { GatewayConfigSchema } = await import(pathToFileURL(path.join(root, 'dist', 'config', 'schema.js')).href)
const ajv = configAjv({ code: { source: true } })
const code = standalone.default(ajv, ajv.compile(GatewayConfigSchema))
writeFileSync(path.join(dir, PRECOMPILED_FILE), `${code}\nmodule.exports.fingerprint = ${JSON.stringify(schemaFingerprint())};\n`)
