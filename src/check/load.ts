/**
 * YAML text → validated, frozen {@link GatewayConfig}, or a {@link ConfigError} listing every problem with
 * `file:line:col` and the dotted key.
 */
import { instancePathOf, pruneInvalid } from './prune.js'
import { schemaIssue, withoutUnionNoise } from './schema-issues.js'
import type { Problem } from '../common/problem.js'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import type { AuthorizationServerConfig, GatewayConfig } from '../config/schema.js'
import { configValidator } from './config-validator.js'
import { lintConfig } from './lint.js'
import { ConfigError, formatPath, sortIssues, type ConfigIssue, type ConfigPath } from './config-error.js'
import { readYaml } from './yaml-source.js'

export { ConfigError, formatIssue, formatPath, type ConfigIssue, type ConfigPath } from './config-error.js'

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

/** A config file's text; a file that cannot be read is a ConfigError. */
export function readConfigFile(fileName: string): string {
  try {
    return readFileSync(fileName, 'utf8')
  } catch (error) {
    throw new ConfigError(fileName, [{ line: 1, col: 1, path: '', message: `cannot read the file: ${(error as Error).message}` }])
  }
}

/** The SHA-256 of a config's text, hex: what `portcullis_config_info` and the `config.reloaded` audit event name. */
export function configDigest(text: string): string {
  return createHash('sha256').update(text).digest('hex')
}

/** Reads and loads a config file; relative paths in it resolve against its directory. */
export function loadConfigFile(fileName: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  return loadConfig(fileName, readConfigFile(fileName), env)
}

/**
 * Parses, substitutes `${VAR}`, validates against the schema, then checks what a schema cannot
 * (references, route overlaps, pattern syntax). Throws one ConfigError holding every problem.
 */
export function loadConfig(fileName: string, text: string, env: NodeJS.ProcessEnv = process.env, options: LoadOptions = {}): GatewayConfig {
  const source = readYaml(fileName, text)
  const issue = (configPath: ConfigPath, message: string, atKey = false): ConfigIssue =>
    ({ ...source.locate(configPath, atKey), path: formatPath(configPath), message })

  const raw: unknown = source.value ?? {}
  // A missing variable becomes '' so the rest of the file is still checked; what that '' then breaks
  // at the same key is not reported twice.
  const envIssues: ConfigIssue[] = []
  const value = substituteEnv(raw, env, (configPath, message) => envIssues.push(issue(configPath, message)))
  const unset = envIssues.map((envIssue) => envIssue.path)
  const causedByEnv = (key: string) =>
    unset.some((at) => key === at || key.startsWith(`${at}.`) || key.startsWith(`${at}[`))
  const fail = (issues: ConfigIssue[]) => new ConfigError(fileName, sortIssues([...envIssues, ...issues]))

  const validateSchema = configValidator(options.writtenValidator ?? true)
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



// `$${` (an escaped `${`), a `${NAME}` reference, or a `${` that is neither.
const REFERENCE = /\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{/g

/**
 * `${NAME}` in any string value becomes the variable's value; `$${` stays a literal `${`. Any other
 * `${` (a typo such as `${SECRET` or `${my-secret}`) is an error: it must not become a literal secret.
 * In place, on the tree the parser just made (each object once, so what an alias shares is substituted once);
 * the path is put together only for a problem.
 */
function substituteEnv(root: unknown, env: NodeJS.ProcessEnv, report: (configPath: ConfigPath, message: string) => void): unknown {
  const at: (string | number)[] = []
  const seen = new Set<object>()
  const substitute = (text: string) => text.replace(REFERENCE, (whole, name: string | undefined) => {
    if (whole === '$${') return '${'
    if (name === undefined) {
      report([...at], 'has a "${" that is not a ${NAME} reference (write $${ for a literal "${")')
      return ''
    }
    const replacement = env[name]
    if (replacement === undefined) { report([...at], `\${${name}} is not set`); return '' }
    return replacement
  })
  const visit = (value: unknown): unknown => {
    if (typeof value === 'string') return value.includes('${') ? substitute(value) : value
    if (value === null || typeof value !== 'object' || seen.has(value)) return value
    seen.add(value)
    const container = value as Record<string | number, unknown>
    for (const key of Array.isArray(value) ? value.keys() : Object.keys(value)) {
      at.push(key)
      const item = container[key]
      const substituted = visit(item)
      if (substituted !== item) container[key] = substituted
      at.pop()
    }
    return value
  }
  return visit(root)
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
