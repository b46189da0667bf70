/** `portcullis check` and `portcullis hash-secret`: the commands that start nothing and load no server code. */
import { ConfigError, loadConfigFile } from './check/load.js'
import { configWarnings } from './check/lint.js'
import { hashSecret } from './crypto/secret-hash.js'
import { readStdin } from './cli-io.js'

/** Validates the config file: warnings and `FILE: OK` on stdout (0), or every problem on stderr (1). */
export function checkConfig(configFile: string): number {
  try {
    const config = loadConfigFile(configFile)
    for (const warning of configWarnings(config)) console.log(`${configFile}: warning: ${warning}`)
    console.log(`${configFile}: OK`)
    return 0
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    console.error(error.message)
    return 1
  }
}

/** Prints a `client_secret_hash` / `password_hash` value for the secret on standard input. */
export async function printSecretHash(): Promise<number> {
  const secret = await readStdin()
  if (secret === '') {
    console.error('hash-secret: the secret on standard input is empty')
    return 1
  }
  console.log(await hashSecret(secret))
  return 0
}
