#!/usr/bin/env node
/** `portcullis start | check | hash-secret | keys rotate` — `start` = loadConfigFile → buildGateway → listen. */
import { existsSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { ConfigError, loadConfigFile } from './config/load.js'
import { configWarnings } from './config/lint.js'
import { hashSecret } from './crypto/secret-hash.js'

const USAGE = `usage: portcullis <command> [--config FILE]

commands:
  start         serve the gateway described by the config file (default config/portcullis.yaml)
  check         validate the config file: print every problem as FILE:LINE:COL  key: message, exit 1 if any
  hash-secret   read a secret on standard input, print a client_secret_hash / password_hash value
  keys rotate   publish new signing keys in the authorization server's store; they sign after the
                publish delay, and the old keys leave the JWKS once their tokens have expired`

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '')
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** `portcullis keys rotate`: checklist JW-05, done on the store the gateway uses; running gateways pick it up on reload. */
async function rotateKeys(configFile: string): Promise<number> {
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
    console.error(`keys rotate: the authorization server is not enabled in ${configFile}`)
    return 1
  }
  const [{ resolveSettings }, { openStore }, { KeyManager, keyRetirementSeconds }] = await Promise.all([
    import('./authserver/settings.js'), import('./authserver/store.js'), import('./authserver/keys.js'),
  ])
  const settings = resolveSettings(as)
  if (settings.store.type === 'memory') {
    console.error('keys rotate: a memory store lives inside the gateway process; there is nothing to rotate from here')
    return 1
  }
  // Opening a missing file would create an empty store, and keys no gateway uses.
  if (!existsSync(settings.store.path)) {
    console.error(`keys rotate: no store at ${settings.store.path} (start the gateway once to create it and its keys)`)
    return 1
  }
  let store
  try {
    store = await openStore(settings)
    await store.ping()
  } catch (error) {
    console.error(`keys rotate: cannot open the store at ${settings.store.path}: ${messageOf(error)}`)
    await store?.close().catch(() => {})
    return 1
  }
  try {
    const warn = (fields: unknown, message?: string) => console.error(`keys rotate: warning: ${message ?? ''} ${JSON.stringify(fields)}`)
    const keys = await KeyManager.open(store, {
      algorithm: settings.algorithm,
      publishDelayMs: settings.publishDelayMs,
      retireAfterSeconds: keyRetirementSeconds(settings),
      now: Date.now,
      log: { info: () => {}, warn },
      reloadIntervalMs: 0,
    })
    const { added, retiring, activatesAt, retiresAt } = await keys.rotate()
    keys.close()
    for (const kid of added) console.log(`added ${kid}`)
    for (const kid of retiring) console.log(`retiring ${kid}`)
    console.log(`new keys sign from ${new Date(activatesAt).toISOString()}; retiring keys leave the JWKS at ${new Date(retiresAt).toISOString()}`)
    return 0
  } catch (error) {
    console.error(`keys rotate: ${messageOf(error)}`)
    return 1
  } finally {
    await store.close()
  }
}

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { config: { type: 'string', short: 'c', default: 'config/portcullis.yaml' }, help: { type: 'boolean', short: 'h' } },
  })
  const [command] = positionals
  if (values.help || !command) {
    console.log(USAGE)
    return command || values.help ? 0 : 2
  }
  switch (command) {
    case 'check': {
      try {
        const config = loadConfigFile(values.config)
        for (const warning of configWarnings(config)) console.log(`${values.config}: warning: ${warning}`)
        console.log(`${values.config}: OK`)
        return 0
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        console.error(error.message)
        return 1
      }
    }
    case 'start': {
      // Imported here so `check` and `hash-secret` do not load fastify, undici and jose.
      const { runPortcullis } = await import('./server/run.js')
      let running
      try {
        running = await runPortcullis(values.config)
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        console.error(error.message)
        return 1
      }
      process.on('SIGHUP', () => { void running.reload('SIGHUP') })
      const stop = (signal: string) => {
        running.shutdown(signal).then(() => process.exit(0), (error: unknown) => {
          console.error(`shutdown failed: ${messageOf(error)}`)
          process.exit(1)
        })
      }
      process.once('SIGINT', stop)
      process.once('SIGTERM', stop)
      return -1  // keep running
    }
    case 'hash-secret': {
      const secret = await readStdin()
      if (secret === '') {
        console.error('hash-secret: the secret on standard input is empty')
        return 1
      }
      console.log(await hashSecret(secret))
      return 0
    }
    case 'keys': {
      if (positionals[1] !== 'rotate' || positionals.length > 2) {
        console.error(`unknown keys command: ${positionals.slice(1).join(' ') || '(none)'}\n\n${USAGE}`)
        return 2
      }
      return rotateKeys(values.config)
    }
    default:
      console.error(`unknown command: ${command}\n\n${USAGE}`)
      return 2
  }
}

main(process.argv.slice(2)).then(
  (code) => { if (code >= 0) process.exitCode = code },
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : error)
    process.exitCode = 1
  },
)
