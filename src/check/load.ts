/**
 * YAML text → validated, frozen {@link GatewayConfig}, or a {@link ConfigError} listing every problem with
 * `file:line:col` and the dotted key.
 */
import { instancePathOf, pruneInvalid } from './prune.js'
import { schemaIssue, withoutUnionNoise } from './schema-issues.js'
import type { Problem } from '../common/problem.js'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { LineCounter, parseDocument, isMap, isPair, isScalar, isSeq, type Document, type Node } from 'yaml'
import type { AuthorizationServerConfig, GatewayConfig } from '../config/schema.js'
import { configValidator } from './config-validator.js'
import { lintConfig } from './lint.js'

export type ConfigPath = ReadonlyArray<string | number>

export interface ConfigIssue {
  line: number
  col: number
  path: string
  message: string
}

/** Every problem found in one config file; `toString()` is what `portcullis check` prints. */
export class ConfigError extends Error {
  constructor(readonly fileName: string, readonly issues: ConfigIssue[]) {
    super(issues.map((issue) => formatIssue(fileName, issue)).join('\n'))
    this.name = 'ConfigError'
  }
}

export function formatIssue(fileName: string, issue: ConfigIssue): string {
  const key = issue.path === '' ? '' : `${issue.path}: `
  return `${fileName}:${issue.line}:${issue.col}  ${key}${issue.message}`
}

/** `['routes', 2, 'scopes']` → `routes[2].scopes` */
export function formatPath(configPath: ConfigPath): string {
  let out = ''
  for (const part of configPath) out += typeof part === 'number' ? `[${part}]` : out === '' ? part : `.${part}`
  return out
}

/** The validator {@link LoadOptions.writtenValidator} asks for, made on first use (the compiled one is kept by config-validator.ts). */
let taken: ReturnType<typeof configValidator> | undefined
const schemaValidator = (written: boolean) => (written ? (taken ??= configValidator()) : configValidator(false))

export interface LoadOptions {
  /**
   * Whether the schema's validator may be the one the build wrote (config-validator.ts), as the loader thread of a
   * reload and `portcullis check` take it; `false` compiles it. A serving process's event loop compiles its own:
   * measured (bench/reload.mjs --pin, 10,000 routes), with the written one on the event loop the requests sent during
   * three reloads waited over 10 ms a median 90 times, against 52 with the compiled one, through longer
   * young-generation collections on the event loop; why was not found (docs/performance.md, routes).
   */
  readonly writtenValidator?: boolean
}

/** Finds where a dotted path sits in the YAML document (the key itself with `atKey`). */
export type Locate = (configPath: ConfigPath, atKey?: boolean) => { line: number; col: number }

function makeLocator(doc: Document, lineCounter: LineCounter): Locate {
  return (configPath, atKey = false) => {
    let offset = 0
    // Walk down as far as the path exists, so a missing key points at its parent.
    for (let depth = configPath.length; depth >= 0; depth--) {
      const prefix = configPath.slice(0, depth)
      if (atKey && depth === configPath.length && depth > 0) {
        const parent = prefix.length > 1 ? doc.getIn(prefix.slice(0, -1), true) : doc.contents
        if (isMap(parent)) {
          const pair = parent.items.find((item) => isPair(item) && isScalar(item.key) && item.key.value === prefix.at(-1))
          const range = pair && isScalar(pair.key) ? pair.key.range : undefined
          if (range) { offset = range[0]; break }
        }
        continue
      }
      const node = depth === 0 ? doc.contents : doc.getIn(prefix, true)
      const range = (node as { range?: [number, number, number] } | null | undefined)?.range
      if (range) { offset = range[0]; break }
    }
    const { line, col } = lineCounter.linePos(offset)
    return { line, col }
  }
}

/** A config file's text; a file that cannot be read is a ConfigError. */
export function readConfigFile(fileName: string): string {
  try {
    return readFileSync(fileName, 'utf8')
  } catch (error) {
    throw new ConfigError(fileName, [{ line: 1, col: 1, path: '', message: `cannot read the file: ${(error as Error).message}` }])
  }
}

/** Reads and loads a config file; relative paths in it resolve against its directory. */
export function loadConfigFile(fileName: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  return loadConfig(fileName, readConfigFile(fileName), env)
}

/** The dotted path of the key or value at `offset` (where a YAML error points). */
function pathAtOffset(node: unknown, offset: number, at: (string | number)[] = []): (string | number)[] {
  const inside = (n: unknown) => {
    const range = (n as Node | null | undefined)?.range
    return range !== undefined && range !== null && range[0] <= offset && offset < Math.max(range[1], range[0] + 1)
  }
  if (isMap(node)) {
    for (const pair of node.items) {
      const key = isScalar(pair.key) ? pair.key.value : undefined
      if (typeof key !== 'string' && typeof key !== 'number') continue
      if (inside(pair.key)) return [...at, String(key)]
      if (inside(pair.value)) return pathAtOffset(pair.value, offset, [...at, String(key)])
    }
  } else if (isSeq(node)) {
    for (const [index, item] of node.items.entries()) if (inside(item)) return pathAtOffset(item, offset, [...at, index])
  }
  return at
}

/**
 * Parses, substitutes `${VAR}`, validates against the schema, then checks what a schema cannot
 * (references, route overlaps, pattern syntax). Throws one ConfigError holding every problem.
 */
export function loadConfig(fileName: string, text: string, env: NodeJS.ProcessEnv = process.env, options: LoadOptions = {}): GatewayConfig {
  const lineCounter = new LineCounter()
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  if (doc.errors.length > 0) {
    throw new ConfigError(fileName, sortIssues(doc.errors.map((error) => {
      const { line, col } = lineCounter.linePos(error.pos[0])
      const message = error.message.split('\n')[0] ?? 'YAML syntax error'
      // A duplicate key is named exactly; for other syntax errors the key at the position may not be the culprit.
      const at = error.code === 'DUPLICATE_KEY' ? formatPath(pathAtOffset(doc.contents, error.pos[0])) : ''
      return { line, col, path: at, message }
    })))
  }
  const locate = makeLocator(doc, lineCounter)
  const issue = (configPath: ConfigPath, message: string, atKey = false): ConfigIssue =>
    ({ ...locate(configPath, atKey), path: formatPath(configPath), message })

  const raw: unknown = doc.toJS({ maxAliasCount: 100 }) ?? {}
  // A missing variable becomes '' so the rest of the file is still checked; what that '' then breaks
  // at the same key is not reported twice.
  const envIssues: ConfigIssue[] = []
  const value = substituteEnv(raw, [], env, (configPath, message) => envIssues.push(issue(configPath, message)))
  const unset = envIssues.map((envIssue) => envIssue.path)
  const causedByEnv = (key: string) =>
    unset.some((at) => key === at || key.startsWith(`${at}.`) || key.startsWith(`${at}[`))
  const fail = (issues: ConfigIssue[]) => new ConfigError(fileName, sortIssues([...envIssues, ...issues]))

  const validateSchema = schemaValidator(options.writtenValidator ?? true)
  if (!validateSchema(value)) {
    // An unknown key is wrong whatever its value; any other error under an unset variable is its echo.
    const all = validateSchema.errors ?? []
    const errors = withoutUnionNoise(all.filter((error) =>
      error.keyword === 'additionalProperties' || !causedByEnv(formatPath(instancePathOf(error)))))
    // One pass: the lint's problems too, on what remains once the invalid parts are cut (prune.ts).
    const pruned = pruneInvalid(value, all, (copy) => (validateSchema(copy) ? null : [...validateSchema.errors ?? []]))
    const more = pruned === undefined ? [] : lintProblems(pruned.value as GatewayConfig, path.dirname(path.resolve(fileName)))
      .flatMap((problem) => {
        const placed = pruned.place(problem.path, problem.message)
        return placed === undefined || causedByEnv(formatPath(placed.path)) ? [] : [{ ...problem, ...placed }]
      })
    throw fail([...errors.map((error) => schemaIssue(error, issue)), ...more.map((problem) => issue(problem.path, problem.message, problem.atKey))])
  }
  const config = resolvePaths(value, path.dirname(path.resolve(fileName)))
  const problems = lintConfig(config).filter((problem) => !causedByEnv(formatPath(problem.path)))
  if (problems.length > 0 || envIssues.length > 0) {
    throw fail(problems.map((problem) => issue(problem.path, problem.message, problem.atKey)))
  }
  return deepFreeze(config)
}

/** The lint's problems of a config that passes the schema; none when the lint fails on a part it did not expect. */
function lintProblems(config: GatewayConfig, baseDir: string): Problem[] {
  try {
    return lintConfig(resolvePaths(config, baseDir))
  } catch {
    return []
  }
}

/** File order, so `portcullis check` reads top to bottom. */
function sortIssues(issues: ConfigIssue[]): ConfigIssue[] {
  return issues.sort((a, b) => a.line - b.line || a.col - b.col)
}


// `$${` (an escaped `${`), a `${NAME}` reference, or a `${` that is neither.
const REFERENCE = /\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{/g

/**
 * `${NAME}` in any string value becomes the variable's value; `$${` stays a literal `${`. Any other
 * `${` (a typo such as `${SECRET` or `${my-secret}`) is an error: it must not become a literal secret.
 */
function substituteEnv(value: unknown, at: (string | number)[], env: NodeJS.ProcessEnv,
  report: (configPath: ConfigPath, message: string) => void): unknown {
  if (typeof value === 'string') {
    if (!value.includes('${')) return value
    return value.replace(REFERENCE, (whole, name: string | undefined) => {
      if (whole === '$${') return '${'
      if (name === undefined) {
        report(at, 'has a "${" that is not a ${NAME} reference (write $${ for a literal "${")')
        return ''
      }
      const replacement = env[name]
      if (replacement === undefined) { report(at, `\${${name}} is not set`); return '' }
      return replacement
    })
  }
  if (Array.isArray(value)) return value.map((item, index) => substituteEnv(item, [...at, index], env, report))
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[key] = substituteEnv(item, [...at, key], env, report)
    return out
  }
  return value
}

/** Contract: relative file paths resolve against the config file's directory. */
function resolvePaths(config: GatewayConfig, baseDir: string): GatewayConfig {
  const resolve = (file: string) => path.resolve(baseDir, file)
  const resolveOutput = (output: string) => (output === 'stdout' ? output : resolve(output))
  const tls = config.server?.tls
  return {
    ...config,
    ...(config.server && {
      server: {
        ...config.server,
        ...(tls && {
          tls: {
            ...tls, cert_file: resolve(tls.cert_file), key_file: resolve(tls.key_file),
            ...(tls.client_ca_file !== undefined && { client_ca_file: resolve(tls.client_ca_file) }),
          },
        }),
      },
    }),
    upstreams: Object.fromEntries(Object.entries(config.upstreams).map(([name, upstream]) =>
      [name, upstream.ca_file ? { ...upstream, ca_file: resolve(upstream.ca_file) } : upstream])),
    ...(config.authorization_server && { authorization_server: resolveAuthServerPaths(config.authorization_server, resolve) }),
    ...(config.audit?.output !== undefined && {
      audit: {
        ...config.audit,
        output: typeof config.audit.output === 'string' ? resolveOutput(config.audit.output) : config.audit.output.map(resolveOutput),
      },
    }),
    ...(config.issuers && {
      issuers: config.issuers.map((issuer) => ({
        ...issuer,
        ...(issuer.jwks_file && { jwks_file: resolve(issuer.jwks_file) }),
        ...(issuer.introspection?.ca_file && { introspection: { ...issuer.introspection, ca_file: resolve(issuer.introspection.ca_file) } }),
      })),
    }),
  }
}

/** The embedded server's files: its SQLite store, the CAs of client metadata document hosts, clients' self-signed certificates, identity providers' secrets and keys. */
function resolveAuthServerPaths(as: AuthorizationServerConfig, resolve: (file: string) => string): AuthorizationServerConfig {
  const documents = as.client_metadata_documents
  return {
    ...as,
    ...(as.store?.path && { store: { ...as.store, path: resolve(as.store.path) } }),
    ...(documents?.ca_file && { client_metadata_documents: { ...documents, ca_file: resolve(documents.ca_file) } }),
    ...(as.clients && {
      clients: as.clients.map((client) => (client.self_signed_certificate_file === undefined ? client
        : { ...client, self_signed_certificate_file: resolve(client.self_signed_certificate_file) })),
    }),
    ...(as.identity_providers && {
      identity_providers: as.identity_providers.map((provider) => ({
        ...provider,
        ...(provider.client_secret_file !== undefined && { client_secret_file: resolve(provider.client_secret_file) }),
        ...(provider.private_key_jwt && { private_key_jwt: { ...provider.private_key_jwt, key_file: resolve(provider.private_key_jwt.key_file) } }),
      })),
    }),
  }
}

/** A loaded config, or a part of one, frozen as `loadConfig` returns it (one that crossed from a worker thread comes unfrozen). */
export function freezeConfig<T extends object>(config: T): T {
  return deepFreeze(config)
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const item of Object.values(value)) deepFreeze(item)
  }
  return value
}
