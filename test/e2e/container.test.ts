/**
 * The container image, without a Docker engine: the Dockerfile's stages replayed in a temp dir (COPY from
 * the repo, RUN in the stage's WORKDIR with ENV, absolute paths mapped under the temp dir), then the final
 * stage's ENTRYPOINT + CMD started as an unprivileged user, its HEALTHCHECK run as is, and SIGTERM.
 * Also: config/docker.yaml stays the default config with container listeners, and the Kubernetes
 * manifests of docs/deployment.md are valid and agree with the image.
 */
import { execFile, execFileSync } from 'node:child_process'
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse, parseAllDocuments, parseDocument } from 'yaml'
import { loadConfig } from '../../src/check/load.js'
import { parseDuration } from '../../src/config/units.js'
import { YOUNG_GENERATION_FLAG, youngGenerationPays } from '../../src/server/young-generation.js'
import { spawnProcess, waitFor } from '../support/cli.js'
import { closedPort } from '../support/upstream.js'

// ---------------------------------------------------------------------------------------------------
// The Dockerfile, parsed: one instruction per line (the Dockerfile promises no continuations).

interface Instruction { keyword: string; args: string }
interface Stage { name: string; from: string; instructions: Instruction[] }

function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = []
  for (const line of text.split('\n').map((l) => l.trim())) {
    if (line === '' || line.startsWith('#')) continue
    if (line.endsWith('\\')) throw new Error(`Dockerfile: no line continuations, please: ${line}`)
    const [, keyword = '', args = ''] = /^(\S+)\s*(.*)$/.exec(line)!
    if (keyword.toUpperCase() === 'FROM') {
      const [, from = '', name] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args)!
      stages.push({ name: name ?? String(stages.length), from, instructions: [] })
    } else {
      if (stages.length === 0) throw new Error(`Dockerfile: ${keyword} before FROM`)
      stages.at(-1)!.instructions.push({ keyword: keyword.toUpperCase(), args })
    }
  }
  return stages
}

const execForm = (args: string): string[] => {
  const value = JSON.parse(args) as unknown
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) throw new Error(`not an exec-form array: ${args}`)
  return value
}
const all = (stage: Stage, keyword: string) => stage.instructions.filter((i) => i.keyword === keyword).map((i) => i.args)
const last = (stage: Stage, keyword: string) => all(stage, keyword).at(-1)

/** `--from=deps --chown=0:0 a b ./dest` → flags, sources, destination. */
function parseCopy(args: string) {
  const words = args.split(/\s+/)
  const flags = Object.fromEntries(words.filter((w) => w.startsWith('--')).map((w) => w.slice(2).split('=') as [string, string]))
  const paths = words.filter((w) => !w.startsWith('--'))
  return { flags, sources: paths.slice(0, -1), dest: paths.at(-1)! }
}

/** `--interval=10s … CMD ["node", …]` */
function parseHealthcheck(args: string) {
  const at = args.indexOf('CMD ')
  const options = Object.fromEntries(args.slice(0, at).trim().split(/\s+/).filter(Boolean).map((w) => w.slice(2).split('=') as [string, string]))
  return { options, command: execForm(args.slice(at + 4)) }
}

/** What .dockerignore keeps out of the build context (plain names, dir prefixes and `*` globs). */
function dockerIgnored(source: string): boolean {
  const patterns = readFileSync('.dockerignore', 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
  const normal = path.posix.normalize(source).replace(/\/$/, '')
  return patterns.some((pattern) => {
    const glob = new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}(/|$)`)
    return glob.test(normal)
  })
}

// ---------------------------------------------------------------------------------------------------
// The replay.

const REPO = process.cwd()
const DOCKERFILE = parseDockerfile(readFileSync('Dockerfile', 'utf8'))
const FINAL = DOCKERFILE.at(-1)!
const DOCKER_CONFIG_TEXT = readFileSync('config/docker.yaml', 'utf8')
const DOCKER_CONFIG = parse(DOCKER_CONFIG_TEXT) as {
  server: { listen: string }
  admin: { listen: string }
  authorization_server: { store: { path: string } }
}
const portOf = (listen: string) => Number(listen.slice(listen.lastIndexOf(':') + 1))

/** Who runs the process: the image's USER is a non-root uid; here, `nobody` when we are root, else ourselves. */
function unprivilegedUser(): { uid: number; gid: number } {
  const self = { uid: process.getuid!(), gid: process.getgid!() }
  if (self.uid !== 0) return self
  // `nobody` must be able to reach the node binary: every directory above it searchable by others.
  for (let dir = process.execPath; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return self
  }
  return { uid: 65534, gid: 65534 }
}

/** The environment npm would see in a build: ours, minus what `npm test` exports about this repo. */
function buildEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(npm_lifecycle_|npm_package_|npm_command$|npm_execpath$|npm_node_execpath$|npm_config_local_prefix$|INIT_CWD$|NODE_ENV$|VITEST)/.test(key)) continue
    env[key] = value
  }
  // RUN's `node` and `npm` are the ones running this test.
  env.PATH = `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}`
  return env
}

/**
 * better-sqlite3's install script (prebuild-install) downloads a prebuilt binary from GitHub, or compiles
 * SQLite (minutes). CI may not reach GitHub: offer it, through the package's documented local-prebuilds
 * directory, the binary this repo's own `npm ci` produced for the same version and Node ABI. The script
 * still runs, unpacks and loads it; without such a binary it falls back to downloading or compiling.
 */
function localPrebuilds(dir: string): NodeJS.ProcessEnv {
  const pkgDir = path.join(REPO, 'node_modules/better-sqlite3')
  const binary = path.join(pkgDir, 'build/Release/better_sqlite3.node')
  const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, { version?: string }> }
  const version = lock.packages['node_modules/better-sqlite3']?.version
  const installed = (JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as { version: string }).version
  if (!existsSync(binary) || version !== installed) return {}
  mkdirSync(dir, { recursive: true })
  const tarball = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`
  try {
    execFileSync('tar', ['-czf', path.join(dir, tarball), '-C', pkgDir, 'build/Release/better_sqlite3.node'])
  } catch {
    return {}  // no tar here: let the install script download or compile
  }
  // On musl (Alpine) prebuild-install asks for `linuxmusl`.
  cpSync(path.join(dir, tarball), path.join(dir, tarball.replace(`-${process.platform}-`, `-${process.platform}musl-`)))
  return { npm_config_better_sqlite3_local_prebuilds: dir }
}

interface Image {
  root: string
  /** An absolute path of the final image, in the temp dir. */
  at(imagePath: string): string
  workdir: string
  env: Record<string, string>
  user: { uid: number; gid: number }
  skipped: string[]
}

/** Replays every stage; the final one becomes the image. */
async function buildImage(root: string, user: { uid: number; gid: number }): Promise<Image> {
  const roots = new Map<string, string>()
  const skipped: string[] = []
  const baseEnv = { ...buildEnv(), ...localPrebuilds(path.join(root, 'prebuilds')) }
  let image: Image | undefined
  for (const stage of DOCKERFILE) {
    const stageRoot = path.join(root, `stage-${stage.name}`)
    mkdirSync(stageRoot, { recursive: true })
    roots.set(stage.name, stageRoot)
    const at = (imagePath: string) => path.join(stageRoot, imagePath)
    let workdir = '/'
    const env: Record<string, string> = {}
    for (const { keyword, args } of stage.instructions) {
      switch (keyword) {
        case 'WORKDIR':
          workdir = path.posix.resolve(workdir, args)
          mkdirSync(at(workdir), { recursive: true })
          break
        case 'ENV': {
          const [, key = '', value = ''] = /^([A-Za-z_][A-Za-z0-9_]*)=(\S+)$/.exec(args) ?? []
          if (!key) throw new Error(`ENV: one KEY=value per line, please: ${args}`)
          env[key] = value
          break
        }
        case 'COPY': {
          const { flags, sources, dest } = parseCopy(args)
          const destPath = path.posix.resolve(workdir, dest)
          for (const source of sources) {
            if (source.includes('*')) throw new Error(`COPY: no globs, please: ${args}`)
            let from: string
            if (flags.from !== undefined) {
              from = path.join(roots.get(flags.from) ?? '', path.posix.resolve('/', source))
            } else {
              if (dockerIgnored(source)) throw new Error(`COPY ${source}: excluded from the build context by .dockerignore`)
              from = path.join(REPO, source)
            }
            const target = dest.endsWith('/') || sources.length > 1 ? path.posix.join(destPath, path.posix.basename(source)) : destPath
            mkdirSync(path.dirname(at(target)), { recursive: true })
            cpSync(from, at(target), { recursive: true, verbatimSymlinks: true })
          }
          break
        }
        case 'RUN': {
          // System packages (compilers for native addons) are the base image's business, not ours.
          if (/^apt-get\s/.test(args)) {
            skipped.push(args)
            break
          }
          const [, owner] = /\bchown (\S+)/.exec(args) ?? []
          if (owner !== undefined && owner !== last(FINAL, 'USER')) throw new Error(`RUN chown ${owner}: not the image's USER ${last(FINAL, 'USER')}`)
          const command = args
            .replace(/(^|\s)(\/[^\s;&|]*)/g, (_match, space: string, absolute: string) => `${space}${at(absolute)}`)
            .replace(/\bchown \S+/g, `chown ${user.uid}:${user.gid}`)
          try {
            // Asynchronously: a slow step (npm ci, a compile) must not block this test worker's event loop.
            await promisify(execFile)('sh', ['-c', command], { cwd: at(workdir), env: { ...baseEnv, ...env }, maxBuffer: 64 * 1024 * 1024 })
          } catch (error) {
            const { stdout, stderr } = error as { stdout?: string; stderr?: string }
            throw new Error(`stage ${stage.name}: RUN ${args} failed:\n${String(stdout ?? '').slice(-2000)}\n${String(stderr ?? '').slice(-4000)}`, { cause: error })
          }
          break
        }
        case 'USER': case 'EXPOSE': case 'VOLUME': case 'HEALTHCHECK': case 'ENTRYPOINT': case 'CMD':
          break  // what the image is run with: read by the tests below
        default:
          throw new Error(`Dockerfile: ${keyword} is not replayed by this test`)
      }
    }
    image = { root: stageRoot, at, workdir, env, user, skipped }
  }
  return image!
}

/** Every file under `dir` (relative), node_modules excluded. */
function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === 'node_modules') return []
    const relative = path.posix.join(prefix, entry.name)
    return entry.isDirectory() ? filesUnder(path.join(dir, entry.name), relative) : [relative]
  })
}

// ---------------------------------------------------------------------------------------------------

describe('the Dockerfile', () => {
  it('runs as a non-root uid, exposes the two listeners of config/docker.yaml, keeps the store on a volume', () => {
    const user = last(FINAL, 'USER')
    expect(user).toMatch(/^[1-9][0-9]*(:[1-9][0-9]*)?$/)  // numeric: runAsNonRoot can verify it
    expect(FINAL.instructions.findIndex((i) => i.keyword === 'USER'))
      .toBeLessThan(FINAL.instructions.findIndex((i) => i.keyword === 'ENTRYPOINT'))
    expect(all(FINAL, 'EXPOSE').join(' ').split(/\s+/).sort()).toEqual(
      [String(portOf(DOCKER_CONFIG.server.listen)), String(portOf(DOCKER_CONFIG.admin.listen))].sort())
    expect(DOCKER_CONFIG.server.listen).toMatch(/^0\.0\.0\.0:/)
    expect(DOCKER_CONFIG.admin.listen).toMatch(/^0\.0\.0\.0:/)
    const volumes = all(FINAL, 'VOLUME').flatMap(execForm)
    expect(volumes).toContain(path.posix.dirname(DOCKER_CONFIG.authorization_server.store.path))
    // Code and config are copied as root (no --chown): the process cannot rewrite them.
    for (const copy of all(FINAL, 'COPY')) expect(parseCopy(copy).flags.chown).toBeUndefined()
  })

  it('reads its config from /etc/portcullis/portcullis.yaml, which the image ships from config/docker.yaml', () => {
    expect(FINAL.instructions).toContainEqual({ keyword: 'ENV', args: 'PORTCULLIS_CONFIG=/etc/portcullis/portcullis.yaml' })
    expect(all(FINAL, 'COPY')).toContain('config/docker.yaml /etc/portcullis/portcullis.yaml')
  })

  it('checks health with node and fetch on the admin /healthz (no curl in slim images)', () => {
    const { options, command } = parseHealthcheck(last(FINAL, 'HEALTHCHECK')!)
    expect(command[0]).toBe('node')
    expect(command.join(' ')).toContain(`http://127.0.0.1:${portOf(DOCKER_CONFIG.admin.listen)}/healthz`)
    expect(command.join(' ')).not.toMatch(/curl|wget/)
    expect(Object.keys(options)).toEqual(expect.arrayContaining(['interval', 'timeout', 'start-period', 'retries']))
  })

  it('sets the young generation size (young-generation.ts) in NODE_OPTIONS exactly when it pays on its node', () => {
    const nodeVersion = /^node:(\d+)/.exec(FINAL.from)?.[1]
    expect(nodeVersion).toBeDefined()
    const options = all(FINAL, 'ENV').filter((args) => args.startsWith('NODE_OPTIONS='))
    expect(options).toEqual(youngGenerationPays(`v${nodeVersion}.0.0`) ? [`NODE_OPTIONS=${YOUNG_GENERATION_FLAG}`] : [])
  })

  it('starts compiled JavaScript with node: no TypeScript loader', () => {
    const argv = [...execForm(last(FINAL, 'ENTRYPOINT')!), ...execForm(last(FINAL, 'CMD')!)]
    expect(argv.slice(0, 3)).toEqual(['node', 'dist/cli.js', 'start'])
    expect(argv.join(' ')).not.toMatch(/tsx|ts-node|--loader|--import|--experimental|\.ts\b/)
  })
})

describe('config/docker.yaml', () => {
  it('is config/portcullis.yaml with the listeners on 0.0.0.0, its public URL said, and the store on the volume', () => {
    const expected = parse(readFileSync('config/portcullis.yaml', 'utf8')) as typeof DOCKER_CONFIG
    expected.server.listen = '0.0.0.0:8080'
    Object.assign(expected.server, { public_url: 'http://127.0.0.1:8080' })
    expected.admin = { listen: '0.0.0.0:9090' }
    expected.authorization_server.store.path = '/var/lib/portcullis/portcullis.db'
    expect(DOCKER_CONFIG).toEqual(expected)
  })
})

describe('the image, replayed outside Docker', () => {
  let root: string
  let image: Image
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), 'portcullis-image-'))
    chmodSync(root, 0o755)  // mkdtemp makes it 0700: the unprivileged user must reach the image inside
    image = await buildImage(root, unprivilegedUser())
  }, 600_000)
  // The replayed image is a full node_modules: removing it took over 20 s on a loaded 2-core machine.
  afterAll(() => { if (root) rmSync(root, { recursive: true, force: true }) }, 120_000)

  const app = (relative = '') => image.at(path.posix.join(image.workdir, relative))
  /** The image's environment, absolute paths in it mapped. */
  const imageEnv = () => ({
    PATH: `${path.dirname(process.execPath)}${path.delimiter}/usr/bin:/bin`,
    ...Object.fromEntries(Object.entries(image.env).map(([k, v]) => [k, v.startsWith('/') ? image.at(v) : v])),
  })
  /** ENTRYPOINT + CMD (or other arguments), `node` being this node. */
  const entrypoint = (args = execForm(last(FINAL, 'CMD')!)) => {
    const [node, ...rest] = [...execForm(last(FINAL, 'ENTRYPOINT')!), ...args]
    expect(node).toBe('node')
    return { command: process.execPath, args: rest }
  }

  it('installs the production dependencies only, better-sqlite3 built by its install script', () => {
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, { dev?: boolean; optional?: boolean }> }
    const packages = Object.entries(lock.packages).filter(([key]) => key.startsWith('node_modules/'))
    for (const [key, entry] of packages) {
      if (entry.dev) expect(existsSync(app(key)), `${key} is a dev dependency`).toBe(false)
      else if (!entry.optional) expect(existsSync(app(key)), `${key} is a production dependency`).toBe(true)
    }
    for (const name of ['typescript', 'vitest', 'tsx', 'ts-node', 'eslint', '@types/node']) expect(existsSync(app(`node_modules/${name}`))).toBe(false)
    expect(existsSync(app('node_modules/better-sqlite3/build/Release/better_sqlite3.node'))).toBe(true)
    expect(image.skipped).toEqual([expect.stringMatching(/^apt-get update && apt-get install .*python3 make g\+\+/)])
  })

  it('holds compiled JavaScript, package.json and nothing of src/ or the tests', () => {
    const files = filesUnder(app())
    expect(files).toContain('dist/cli.js')
    expect(files).toContain('package.json')
    expect(files.filter((file) => /\.ts$/.test(file) && !file.endsWith('.d.ts'))).toEqual([])
    expect(files.filter((file) => /^(src|test)\//.test(file) || /\.test\.js$/.test(file))).toEqual([])
    expect(readFileSync(image.at('/etc/portcullis/portcullis.yaml'), 'utf8')).toBe(DOCKER_CONFIG_TEXT)
  })

  it('passes `check` on the config it ships', () => {
    const { command, args } = entrypoint(['check'])
    const stdout = execFileSync(command, args, { cwd: app(), env: imageEnv(), uid: image.user.uid, gid: image.user.gid, encoding: 'utf8' })
    expect(stdout.trimEnd().split('\n').at(-1)).toBe(`${image.at('/etc/portcullis/portcullis.yaml')}: OK`)
  })

  it('starts as a non-root user, answers its HEALTHCHECK, serves, and exits 0 on SIGTERM', { timeout: 60_000 }, async ({ onTestFinished }) => {
    // The operator's part: ports free on this machine (the image's own are 8080 and 9090).
    const [port, adminPort] = [await closedPort(), await closedPort()]
    const configFile = image.at('/etc/portcullis/portcullis.yaml')
    const doc = parseDocument(readFileSync(configFile, 'utf8'))
    doc.setIn(['server', 'listen'], `0.0.0.0:${port}`)
    doc.setIn(['admin', 'listen'], `0.0.0.0:${adminPort}`)
    doc.setIn(['authorization_server', 'store', 'path'], image.at(DOCKER_CONFIG.authorization_server.store.path))
    writeFileSync(configFile, doc.toString())

    expect(image.user.uid, 'running as root: make the node binary reachable by nobody').not.toBe(0)
    const asUser = { cwd: app(), env: imageEnv(), uid: image.user.uid, gid: image.user.gid }
    const healthcheck = parseHealthcheck(last(FINAL, 'HEALTHCHECK')!).command
      .map((arg) => arg.replace(`127.0.0.1:${portOf(DOCKER_CONFIG.admin.listen)}/`, `127.0.0.1:${adminPort}/`))
    const healthy = () => new Promise<boolean>((resolve) => {
      const probe = spawnProcess(process.execPath, healthcheck.slice(1), asUser)
      void probe.exited.then(({ code }) => resolve(code === 0))
    })
    expect(await healthy()).toBe(false)  // the probe does fail while nothing listens

    const { command, args } = entrypoint()
    const server = spawnProcess(command, args, asUser)
    onTestFinished(() => server.kill())
    const exitedEarly = server.exited.then((how) => { throw new Error(`portcullis exited: ${JSON.stringify({ ...how, ...server.output() })}`) })
    await Promise.race([waitFor('the HEALTHCHECK to pass', healthy, 30_000), exitedEarly])

    expect((await fetch(`http://127.0.0.1:${adminPort}/readyz`)).status).toBe(200)
    const echo = await fetch(`http://127.0.0.1:${port}/public/hello`)
    expect(echo.status).toBe(200)
    expect(await echo.json()).toMatchObject({ method: 'GET', path: '/public/hello' })
    // The store was created on the volume, by the user the image runs as.
    expect(statSync(image.at(DOCKER_CONFIG.authorization_server.store.path)).uid).toBe(image.user.uid)

    server.child.kill('SIGTERM')
    expect(await server.exited).toEqual({ code: 0, signal: null })
    expect(server.output().stdout).toContain('"msg":"shut down"')
    expect(server.output().stderr).toBe('')
  })
})

// ---------------------------------------------------------------------------------------------------

describe('docs/deployment.md', () => {
  type Manifest = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [key: string]: unknown }
  const markdown = readFileSync('docs/deployment.md', 'utf8')
  const blocks = [...markdown.matchAll(/^```ya?ml\n([\s\S]*?)^```$/gm)].map((match) => match[1]!)
  const manifests = blocks.flatMap((block) => parseAllDocuments(block).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`docs/deployment.md: ${doc.errors[0]!.message}`)
    return doc.toJS() as Manifest
  })).filter((doc) => doc !== null && typeof doc === 'object' && 'kind' in doc)
  const one = (kind: string) => {
    const found = manifests.filter((m) => m.kind === kind)
    expect(found, kind).toHaveLength(1)
    return found[0] as Manifest & Record<string, any>  // eslint-disable-line @typescript-eslint/no-explicit-any
  }

  it('has valid YAML manifests: Deployment, Service, ConfigMap, ServiceMonitor', () => {
    expect(manifests.map((m) => m.kind)).toEqual(expect.arrayContaining(['Deployment', 'Service', 'ConfigMap', 'ServiceMonitor']))
    for (const manifest of manifests) {
      expect(manifest.apiVersion, manifest.kind).toMatch(/^[a-z0-9.]*\/?v\d/)
      expect(manifest.metadata?.name, manifest.kind).toMatch(/^[a-z0-9-]+$/)
    }
  })

  it('the ConfigMap holds a portcullis.yaml that passes check', () => {
    const configMap = one('ConfigMap')
    const text = configMap.data['portcullis.yaml'] as string
    // Secret-length stand-ins; the key-encryption key must be 32 bytes of base64, as `openssl rand -base64 32` makes.
    const env = Object.fromEntries([...text.matchAll(/\$\{([A-Z0-9_]+)\}/g)]
      .map((m) => [m[1], m[1] === 'KEY_ENCRYPTION_KEY' ? Buffer.alloc(32, 7).toString('base64') : 'x'.repeat(32)]))
    const config = loadConfig('portcullis.yaml', text, env)
    expect(config.server?.listen).toBe(DOCKER_CONFIG.server.listen)
    expect(config.admin?.listen).toBe(DOCKER_CONFIG.admin.listen)
  })

  it('the Deployment runs the image as non-root, probes the admin port, mounts the ConfigMap directory at /etc/portcullis', () => {
    const deployment = one('Deployment')
    const pod = deployment.spec.template.spec
    const container = pod.containers[0]
    expect(pod.securityContext.runAsNonRoot).toBe(true)
    expect(container.securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true })
    const adminPort = container.ports.find((p: { name: string }) => p.name === 'admin')
    expect(adminPort.containerPort).toBe(portOf(DOCKER_CONFIG.admin.listen))
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' })
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' })
    expect(container.resources.requests).toBeDefined()
    expect(container.resources.limits).toBeDefined()
    const mount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === '/etc/portcullis')
    expect(mount.subPath).toBeUndefined()  // a subPath mount never sees ConfigMap updates
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name)
    expect(volume.configMap.name).toBe(one('ConfigMap').metadata.name)
    // Kubernetes kills the pod after terminationGracePeriodSeconds: it must outlast the drain.
    const config = parse(one('ConfigMap').data['portcullis.yaml'] as string) as { server?: { shutdown_timeout?: string } }
    const drainMs = parseDuration(config.server?.shutdown_timeout ?? '10s')
    const preStopMs = (container.lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(preStopMs + drainMs)
  })

  it('the Service exposes both ports, and the ServiceMonitor scrapes the admin one at /metrics', () => {
    const service = one('Service')
    const deployment = one('Deployment')
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels)
    const names = service.spec.ports.map((p: { name: string; targetPort: string }) => [p.name, p.targetPort])
    expect(names).toEqual(expect.arrayContaining([['http', 'http'], ['admin', 'admin']]))
    const monitor = one('ServiceMonitor')
    expect(monitor.apiVersion).toBe('monitoring.coreos.com/v1')
    expect(monitor.spec.selector.matchLabels).toEqual(service.metadata.labels)
    expect(monitor.spec.endpoints).toEqual([expect.objectContaining({ port: 'admin', path: '/metrics' })])
  })
})
