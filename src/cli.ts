#!/usr/bin/env node
/**
 * `portcullis start | check | hash-secret | keys rotate | keys rekey` — `start` = runPortcullis (listen, reload on SIGHUP,
 * drain on SIGTERM). Exit status 0 ok, 1 config or runtime error, 2 usage error; every error is one
 * line on stderr (a bad config file: one line per problem), never a stack trace.
 */
// First, before the program loads (and garbage-collects): see the module.
import './server/tick-shape.js'
// Then, before anything is optimized: V8's inlining budget (see the module).
import './server/raise-inlining-budget.js'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { ConfigError, loadConfigFile } from './check/load.js'
import { configWarnings } from './check/lint.js'
import { hashSecret } from './crypto/secret-hash.js'
import { oneLine, readStdin } from './cli-io.js'
import { rekeyKeys, rotateKeys } from './cli-keys.js'

const DEFAULT_CONFIG = 'config/portcullis.yaml'

/** A mistake on the command line: one line on stderr, exit status 2. */
class UsageError extends Error {}

type OptionName = 'config' | 'help' | 'version'
const OPTIONS = {
  config: { type: 'string', short: 'c' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} satisfies NonNullable<ParseArgsConfig['options']>

const CONFIG_HELP = `  -c, --config FILE   the config file (default: $PORTCULLIS_CONFIG if set, else ${DEFAULT_CONFIG})`
const HELP_HELP = '  -h, --help          print this help and exit'

interface Command {
  options: OptionName[]
  /** Positional words, the command's name included. */
  words: number
  help: string
}

const COMMANDS: Record<string, Command> = {
  start: {
    options: ['config', 'help'],
    words: 1,
    help: `usage: portcullis start [--config FILE]

Serve the gateway described by the config file: the proxy and the authorization server on server.listen,
/metrics, /healthz and /readyz on admin.listen. SIGHUP, or the file changing on disk, reloads the config
(an invalid one is logged and the old one kept). SIGTERM or SIGINT stop accepting connections, let requests
in flight finish for up to server.shutdown_timeout (default 10s), and exit.

options:
${CONFIG_HELP}
${HELP_HELP}

exit status:
  0  stopped by SIGTERM or SIGINT
  1  the config file is invalid (one line per problem on stderr), or the gateway could not start
     (e.g. a port in use, the store cannot be opened), or the shutdown failed
  2  usage error`,
  },
  check: {
    options: ['config', 'help'],
    words: 1,
    help: `usage: portcullis check [--config FILE]

Validate the config file without starting anything. Prints warnings (insecure but legal settings) and
"FILE: OK" on stdout, or every problem on stderr, one line each: FILE:LINE:COL  dotted.key: message.

options:
${CONFIG_HELP}
${HELP_HELP}

exit status:
  0  the file is valid (warnings may have been printed)
  1  the file is invalid or cannot be read
  2  usage error`,
  },
  'hash-secret': {
    options: ['help'],
    words: 1,
    help: `usage: portcullis hash-secret < secret.txt

Read a secret on standard input (a trailing newline is dropped) and print a value for client_secret_hash
or password_hash, alone on one line.

options:
${HELP_HELP}

exit status:
  0  the hash was printed
  1  the secret is empty
  2  usage error`,
  },
  'keys rotate': {
    options: ['config', 'help'],
    words: 2,
    help: `usage: portcullis keys rotate [--config FILE]

Publish new signing keys in the authorization server's store (sqlite or redis). They sign after
signing.rotation_publish_delay; the old keys leave the JWKS once the tokens they signed have expired.
Running gateways pick the new keys up from the store.

options:
${CONFIG_HELP}
${HELP_HELP}

exit status:
  0  new keys were published
  1  the config file is invalid, the authorization server is disabled or has a memory store,
     or the store cannot be opened
  2  usage error`,
  },
  'keys rekey': {
    options: ['config', 'help'],
    words: 2,
    help: `usage: portcullis keys rekey [--config FILE] < new-key.txt

Re-encrypt every private signing key in the authorization server's store (sqlite or redis) under the key
read on standard input (32 random bytes in base64 or base64url: openssl rand -base64 32; a trailing newline
is dropped). The current key is authorization_server.signing.key_encryption_key of the config file (keys
still in clear are encrypted too). Nothing is written unless every key decrypts; each key is rewritten in
one step, so a run that stopped half-way is finished by running it again. Running gateways keep the keys
they loaded: set key_encryption_key to the new key and restart each of them, and do not run keys rotate
before every one has restarted.

options:
${CONFIG_HELP}
${HELP_HELP}

exit status:
  0  every signing key is encrypted under the new key
  1  the new key is missing or malformed, the config file is invalid, the authorization server is disabled
     or has a memory store, the store cannot be opened, or a key in it decrypts with neither key
  2  usage error`,
  },
}

const USAGE = `usage: portcullis <command> [options]

commands:
  start         serve the gateway described by the config file
  check         validate the config file: print every problem as FILE:LINE:COL  key: message
  hash-secret   read a secret on standard input, print a client_secret_hash / password_hash value
  keys rotate   publish new signing keys in the authorization server's store
  keys rekey    re-encrypt the stored signing keys under a new key read on standard input

options:
${CONFIG_HELP}
  -h, --help          print the usage (of a command: portcullis start --help) and exit
      --version       print the version and exit

exit status:
  0  success
  1  the config file is invalid, or the command failed (details on stderr, one line each)
  2  usage error: unknown command or option, missing or extra argument`

interface Invocation {
  name: string | undefined
  command: Command | undefined
  config: string
  help: boolean
  version: boolean
}

/** Finds the command, then parses strictly with the options that command takes. */
function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv): Invocation {
  const loose = parseArgs({ args: argv, options: OPTIONS, strict: false, allowPositionals: true })
  const [first, second] = loose.positionals
  // `keys` alone is `keys rotate` missing its verb: `portcullis keys --help` shows that command's help.
  const name = first !== 'keys' ? first : second === 'rekey' ? 'keys rekey' : second === 'rotate' || second === undefined ? 'keys rotate' : first
  const command = name === undefined ? undefined : COMMANDS[name]
  const scope = command ? `${name}: ` : 'portcullis: '
  const seeHelp = command ? `(see portcullis ${name} --help)` : '(see portcullis --help)'
  const allowed = command?.options ?? ['config', 'help', 'version']
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      options: Object.fromEntries(['version', ...allowed].map((option) => [option, OPTIONS[option as OptionName]])),
      strict: true,
      allowPositionals: true,
    })
  } catch (error) {
    const { code, message } = error as { code?: string; message: string }
    if (!code?.startsWith('ERR_PARSE_ARGS_')) throw error
    // Node's own text for an unknown option is a paragraph; ours is the option and where to look.
    const unknown = /^Unknown option '([^']+)'/.exec(message)?.[1]
    const problem = unknown ? `unknown option ${unknown}` : message.charAt(0).toLowerCase() + message.slice(1)
    throw new UsageError(`${scope}${problem} ${seeHelp}`)
  }
  const values = parsed.values as Partial<Record<OptionName, string | boolean>>
  const invocation: Invocation = {
    name,
    command,
    config: (values.config as string | undefined) ?? (env.PORTCULLIS_CONFIG || DEFAULT_CONFIG),
    help: values.help === true,
    version: values.version === true,
  }
  if (invocation.help || invocation.version) return invocation
  if (first === undefined) throw new UsageError(`portcullis: a command is required: start, check, hash-secret, keys rotate or keys rekey ${seeHelp}`)
  if (first === 'keys' && (!command || parsed.positionals.length < command.words)) {
    throw new UsageError(`portcullis: unknown keys command: ${parsed.positionals.slice(1).join(' ') || '(none)'}; they are keys rotate and keys rekey (see portcullis keys rotate --help)`)
  }
  if (!command) throw new UsageError(`portcullis: unknown command: ${first} ${seeHelp}`)
  const extra = parsed.positionals.slice(command.words)
  if (extra.length > 0) throw new UsageError(`${scope}unexpected argument: ${extra.join(' ')} ${seeHelp}`)
  return invocation
}

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


/**
 * `server.workers` above 1 (issue 24): this process becomes the primary, which forks the workers (each runs
 * this same command) and supervises them. Resolves to -1 (keep running) once they all listen.
 */
async function startPrimary(configFile: string): Promise<number | undefined> {
  let config
  try {
    config = loadConfigFile(configFile, process.env)
  } catch (error) {
    console.error(error instanceof ConfigError ? error.message : `start: ${oneLine(error)}`)
    return 1
  }
  const { runPrimary, workerCount } = await import('./server/cluster.js')
  const count = workerCount(config)
  if (count <= 1) return undefined
  let primary
  try {
    primary = await runPrimary(config, count)
    await primary.started
  } catch (error) {
    console.error(`start: ${oneLine(error)}`)
    await primary?.shutdown('failed start')
    process.exit(1)
  }
  const stop = (signal: string) => { void primary.shutdown(signal).then(() => process.exit(0)) }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  return -1
}

/** Serves until SIGTERM or SIGINT; resolves to -1 (keep running) once listening. */
async function start(configFile: string): Promise<number> {
  const cluster = (await import('node:cluster')).default
  if (cluster.isPrimary) {
    const code = await startPrimary(configFile)
    if (code !== undefined) return code
  }
  // Imported here so `check` and `hash-secret` do not load fastify, undici and jose.
  let running
  try {
    running = cluster.isWorker
      ? await (await import('./server/cluster-worker.js')).runWorker(configFile)
      : await (await import('./server/run.js')).runPortcullis(configFile)
  } catch (error) {
    console.error(error instanceof ConfigError ? error.message : `start: ${oneLine(error)}`)
    // A listener opened before the failure (the public one, when the admin port is taken) would keep us alive.
    process.exit(1)
  }
  process.on('SIGHUP', () => { void running.reload('SIGHUP') })
  const stop = (signal: string) => {
    running.shutdown(signal).then(() => process.exit(0), (error: unknown) => {
      console.error(`start: shutdown failed: ${oneLine(error)}`)
      process.exit(1)
    })
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  // A worker whose primary is gone drains and exits rather than serve unsupervised.
  if (cluster.isWorker) process.once('disconnect', () => stop('disconnect'))
  return -1
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
    case 'check': {
      try {
        const config = loadConfigFile(invocation.config)
        for (const warning of configWarnings(config)) console.log(`${invocation.config}: warning: ${warning}`)
        console.log(`${invocation.config}: OK`)
        return 0
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        console.error(error.message)
        return 1
      }
    }
    case 'start':
      return start(invocation.config)
    case 'hash-secret': {
      const secret = await readStdin()
      if (secret === '') {
        console.error('hash-secret: the secret on standard input is empty')
        return 1
      }
      console.log(await hashSecret(secret))
      return 0
    }
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
