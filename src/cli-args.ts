/** The command line → what to run: the command, then its options parsed strictly; mistakes are usage errors (exit status 2). */
import { parseArgs } from 'node:util'
import { COMMANDS, DEFAULT_CONFIG, OPTIONS, type Command, type OptionName } from './cli-usage.js'

/** A mistake on the command line: one line on stderr, exit status 2. */
export class UsageError extends Error {}

export interface Invocation {
  name: string | undefined
  command: Command | undefined
  config: string
  help: boolean
  version: boolean
}

/** Finds the command, then parses strictly with the options that command takes. */
export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv): Invocation {
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
