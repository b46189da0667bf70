/** The command line's words: the commands, their options, and the help each prints (`--help`). */
import type { ParseArgsConfig } from 'node:util'

export const DEFAULT_CONFIG = 'config/portcullis.yaml'

export type OptionName = 'config' | 'help' | 'version'
export const OPTIONS = {
  config: { type: 'string', short: 'c' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} satisfies NonNullable<ParseArgsConfig['options']>

const CONFIG_HELP = `  -c, --config FILE   the config file (default: $PORTCULLIS_CONFIG if set, else ${DEFAULT_CONFIG})`
const HELP_HELP = '  -h, --help          print this help and exit'

export interface Command {
  options: OptionName[]
  /** Positional words, the command's name included. */
  words: number
  help: string
}

export const COMMANDS: Record<string, Command> = {
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

export const USAGE = `usage: portcullis <command> [options]

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
