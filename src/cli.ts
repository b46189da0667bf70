#!/usr/bin/env node
/**
 * `portcullis start | check | hash-secret | keys rotate | keys rekey` — `start` = runPortcullis (listen, reload on SIGHUP,
 * drain on SIGTERM). Exit status 0 ok, 1 config or runtime error, 2 usage error; every error is one
 * line on stderr (a bad config file: one line per problem), never a stack trace. The commands: cli-start.ts,
 * cli-check.ts (check, hash-secret), cli-keys.ts; the command line and its help: cli-args.ts, cli-usage.ts.
 */
// First, before the program loads (and garbage-collects): see the module.
import './server/tick-shape.js'
// Then, before anything is optimized: V8's inlining budget (see the module).
import './server/raise-inlining-budget.js'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseCommandLine, UsageError } from './cli-args.js'
import { checkConfig, printSecretHash } from './cli-check.js'
import { oneLine } from './cli-io.js'
import { rekeyKeys, rotateKeys } from './cli-keys.js'
import { start } from './cli-start.js'
import { USAGE } from './cli-usage.js'

/** package.json's version: the nearest portcullis package.json above this file (dist/cli.js → ../package.json, in the repo and the image). */
function readVersion(): string {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json')
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown }
      if (pkg.name === 'portcullis' && typeof pkg.version === 'string') return pkg.version
    }
    if (path.dirname(dir) === dir) throw new Error('cannot find the package.json of portcullis to read the version from')
  }
}

async function main(argv: string[]): Promise<number> {
  const invocation = parseCommandLine(argv, process.env)
  if (invocation.version) {
    console.log(readVersion())
    return 0
  }
  if (invocation.help) {
    console.log(invocation.command?.help ?? USAGE)
    return 0
  }
  switch (invocation.name) {
    case 'check':
      return checkConfig(invocation.config)
    case 'start':
      return start(invocation.config)
    case 'hash-secret':
      return printSecretHash()
    case 'keys rotate':
      return rotateKeys(invocation.config)
    case 'keys rekey':
      return rekeyKeys(invocation.config)
    default:
      throw new Error(`no handler for the command ${invocation.name}`)
  }
}

main(process.argv.slice(2)).then(
  (code) => { if (code >= 0) process.exitCode = code },
  (error: unknown) => {
    console.error(error instanceof UsageError ? error.message : `portcullis: ${oneLine(error)}`)
    process.exitCode = error instanceof UsageError ? 2 : 1
  },
)
