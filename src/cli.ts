#!/usr/bin/env node
/**
 * `portcullis start | check | hash-secret | keys rotate | keys rekey` — `start` = runPortcullis (listen, reload on SIGHUP,
 * drain on SIGTERM). Exit status 0 ok, 1 config or runtime error, 2 usage error; every error is one
 * line on stderr (a bad config file: one line per problem), never a stack trace.
 */
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { ConfigError, loadConfigFile } from './config/load.js'
import { configWarnings } from './config/lint.js'
import { hashSecret } from './crypto/secret-hash.js'
import { describeRedisUrl } from './authserver/storage/redis-url.js'
import type { AuthServerSettings } from './authserver/settings.js'
import type { StorageAdapter } from './authserver/storage/adapter.js'

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

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '')
}

/** stderr takes one line per error: a message with newlines in it is folded. */
const oneLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, ' ')

/**
 * The store of the authorization server in the config file, opened, for `keys rotate` and `keys rekey`;
 * or the exit status after printing why not. The store must exist and hold keys: a store created here
 * would hold keys no gateway uses.
 */
async function openKeyStore(verb: string, configFile: string): Promise<{ settings: AuthServerSettings; store: StorageAdapter } | number> {
  let config
  try {
    config = loadConfigFile(configFile)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    console.error(error.message)
    return 1
  }
  const as = config.authorization_server
  if (!as?.enabled) {
    console.error(`${verb}: the authorization server is not enabled in ${configFile}`)
    return 1
  }
  const [{ resolveSettings }, { openStore }] = await Promise.all([import('./authserver/settings.js'), import('./authserver/store.js')])
  const settings = resolveSettings(as)
  if (settings.store.type === 'memory') {
    console.error(`${verb}: a memory store lives inside the gateway process; there is nothing to change from here`)
    return 1
  }
  const redis = settings.store.type === 'redis'
  // The store's address for messages: the file, or the Redis host (never the URL: it may hold a password).
  const where = redis ? `the Redis store (${describeRedisUrl(settings.store.url!)})` : settings.store.path
  // Opening a missing file would create an empty store, and keys no gateway uses.
  if (!redis && !existsSync(settings.store.path)) {
    console.error(`${verb}: no store at ${where} (start the gateway once to create it and its keys)`)
    return 1
  }
  let store
  try {
    store = await openStore(settings)
    await store.ping()
    // Likewise in Redis: an empty store has never served; keys made here would be used by no gateway.
    if (redis && (await store.list('signing_key')).length === 0) {
      console.error(`${verb}: no signing keys in ${where} (start the gateway once to create them)`)
      await store.close()
      return 1
    }
  } catch (error) {
    console.error(`${verb}: cannot open the store at ${where}: ${oneLine(error)}`)
    await store?.close().catch(() => {})
    return 1
  }
  return { settings, store }
}

/** `portcullis keys rotate`: checklist JW-05, done on the store the gateway uses; running gateways pick it up on reload. */
async function rotateKeys(configFile: string): Promise<number> {
  const opened = await openKeyStore('keys rotate', configFile)
  if (typeof opened === 'number') return opened
  const { settings, store } = opened
  try {
    const { KeyManager, keyRetirementSeconds } = await import('./authserver/keys.js')
    const warn = (fields: unknown, message?: string) => console.error(`keys rotate: warning: ${message ?? ''} ${JSON.stringify(fields)}`)
    const keys = await KeyManager.open(store, {
      algorithm: settings.algorithm,
      publishDelayMs: settings.publishDelayMs,
      retireAfterSeconds: keyRetirementSeconds(settings),
      now: Date.now,
      log: { info: () => {}, warn },
      reloadIntervalMs: 0,
      ...(settings.keyEncryption && { keyEncryption: settings.keyEncryption }),
    })
    const { added, retiring, activatesAt, retiresAt } = await keys.rotate()
    keys.close()
    for (const kid of added) console.log(`added ${kid}`)
    for (const kid of retiring) console.log(`retiring ${kid}`)
    console.log(`new keys sign from ${new Date(activatesAt).toISOString()}; retiring keys leave the JWKS at ${new Date(retiresAt).toISOString()}`)
    // Running instances re-read the store every 30 s; on Redis they are told at once.
    if (settings.store.type === 'redis') await announceKeys(settings.store.url!, settings.store.prefix, warn)
    return 0
  } catch (error) {
    console.error(`keys rotate: ${oneLine(error)}`)
    return 1
  } finally {
    await store.close()
  }
}

/**
 * `portcullis keys rekey`: every private signing key in the store re-encrypted under the key read on
 * standard input (never from argv: it would land in shell history and `ps`). The current key is the config's
 * key_encryption_key. Running gateways keep the keys they loaded; they need the new key before their next start.
 */
async function rekeyKeys(configFile: string): Promise<number> {
  const { KeyEncryptionKey, KEK_CONFIG_KEY, KEK_FORMAT, rekeySigningKeys } = await import('./authserver/key-encryption.js')
  const text = await readStdin()
  if (text === '') {
    console.error('keys rekey: no new key on standard input (openssl rand -base64 32 makes one)')
    return 1
  }
  let next
  try {
    next = KeyEncryptionKey.parse(text)
  } catch {
    // Never echo what was read: it is meant to be a secret.
    console.error(`keys rekey: the new key on standard input ${KEK_FORMAT}`)
    return 1
  }
  const opened = await openKeyStore('keys rekey', configFile)
  if (typeof opened === 'number') return opened
  const { settings, store } = opened
  try {
    const { rekeyed, unchanged } = await rekeySigningKeys(store, settings.keyEncryption, next)
    if (rekeyed.length + unchanged.length === 0) {
      console.error('keys rekey: no signing keys in the store (start the gateway once to create them)')
      return 1
    }
    for (const kid of rekeyed) console.log(`rekeyed ${kid}`)
    for (const kid of unchanged) console.log(`unchanged ${kid} (already under the new key)`)
    console.log(`every signing key is encrypted with key id ${next.id}: set ${KEK_CONFIG_KEY} to the new key, then restart each gateway`)
    return 0
  } catch (error) {
    console.error(`keys rekey: ${oneLine(error)}`)
    return 1
  } finally {
    await store.close()
  }
}

/** Tells the instances sharing the Redis store that the signing keys changed (they publish the new ones at once). */
async function announceKeys(url: string, prefix: string, warn: (fields: unknown, message?: string) => void): Promise<void> {
  const { createRedisBroadcast, revocationChannel } = await import('./authserver/broadcast.js')
  const broadcast = createRedisBroadcast(url, revocationChannel(prefix), { debug: () => {}, warn, error: warn })
  try {
    await broadcast.publish({ keys: true })
  } finally {
    await broadcast.close()
  }
}

/** Serves until SIGTERM or SIGINT; resolves to -1 (keep running) once listening. */
async function start(configFile: string): Promise<number> {
  // Imported here so `check` and `hash-secret` do not load fastify, undici and jose.
  const { runPortcullis } = await import('./server/run.js')
  let running
  try {
    running = await runPortcullis(configFile)
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
