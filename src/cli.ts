#!/usr/bin/env node
/** `portcullis start | check | hash-secret` — `start` = loadConfigFile → buildGateway → listen. */
import { parseArgs } from 'node:util'
import { ConfigError, loadConfigFile } from './config/load.js'
import { configWarnings } from './config/lint.js'
import { hashSecret } from './crypto/secret-hash.js'

const USAGE = `usage: portcullis <command> [--config FILE]

commands:
  start         serve the gateway described by the config file (default config/portcullis.yaml)
  check         validate the config file: print every problem as FILE:LINE:COL  key: message, exit 1 if any
  hash-secret   read a secret on standard input, print a client_secret_hash / password_hash value`

export function parseListen(listen: string): { host: string; port: number } {
  const colon = listen.lastIndexOf(':')
  return { host: listen.slice(0, colon).replace(/^\[|\]$/g, ''), port: Number(listen.slice(colon + 1)) }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '')
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
      let config
      try {
        config = loadConfigFile(values.config)
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        console.error(error.message)
        return 1
      }
      // Imported here so `check` and `hash-secret` do not load fastify, undici and jose.
      const { buildGateway } = await import('./gateway.js')
      const app = await buildGateway(config)
      const { host, port } = parseListen(config.server?.listen ?? '127.0.0.1:8080')
      await app.listen({ host, port })
      const stop = (signal: string) => {
        app.log.info({ signal }, 'shutting down')
        app.close().then(() => process.exit(0), () => process.exit(1))
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
