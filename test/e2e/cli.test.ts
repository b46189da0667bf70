import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { verifySecret } from '../../src/crypto/secret-hash.js'
import { CLI, portcullis, spawnProcess, waitFor, type CliRun } from '../support/cli.js'
import { minimalConfig } from '../support/config.js'
import { closedPort } from '../support/upstream.js'

function writeTemp(name: string, text: string): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'portcullis-cli-')), name)
  writeFileSync(file, text)
  return file
}

const GOOD = minimalConfig()

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it in pretest)')
})

/** The demo config keeps its SQLite store's keys in clear (no key_encryption_key: it runs with no setup). */
const DEFAULT_CONFIG_OK = 'config/portcullis.yaml: warning: authorization_server.signing.key_encryption_key is not set: the private signing keys ' +
  'are stored in clear in the SQLite file; whoever reads it, or a backup of it, can sign tokens\nconfig/portcullis.yaml: OK\n'

describe('portcullis check', () => {
  it('exits 0 and prints OK for config/portcullis.yaml', async () => {
    const run = await portcullis(['check', '--config', 'config/portcullis.yaml'])
    expect(run).toEqual({ code: 0, stdout: DEFAULT_CONFIG_OK, stderr: '' })
  })

  it('checks config/portcullis.yaml when no --config is given', async () => {
    const run = await portcullis(['check'])
    expect(run).toEqual({ code: 0, stdout: DEFAULT_CONFIG_OK, stderr: '' })
  })

  it('exits 0 and prints OK for a good file', async () => {
    const file = writeTemp('good.yaml', GOOD)
    expect(await portcullis(['check', '--config', file])).toEqual({ code: 0, stdout: `${file}: OK\n`, stderr: '' })
  })

  it('exits non-zero and prints every error as FILE:LINE:COL  dotted.key: message', async () => {
    const file = writeTemp('bad.yaml', `upstreams:
  main:
    url: "http://127.0.0.1:9001"
    timeout: 30 seconds
routes:
  - id: all
    path: "/**"
    upstream: main
    auth: maybe
    scopes:
      al: ["x"]
issuers:
  - issuer: "https://idp.example.com/"
    jwks_uri: "https://idp.example.com/jwks"
    audience: ["orders-api"]
    algorithms: [none]
    client_secret: "\${MISSING_SECRET}"
`)
    const run = await portcullis(['check', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stdout).toBe('')
    expect(run.stderr.trimEnd().split('\n')).toEqual([
      `${file}:4:14  upstreams.main.timeout: must be a duration such as 30s, 5m or 1h`,
      `${file}:9:11  routes[0].auth: must be one of required, optional, none`,
      `${file}:11:7  routes[0].scopes.al: unknown key (did you mean "all"?)`,
      `${file}:16:18  issuers[0].algorithms[0]: must be one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA (none and HS* are never accepted)`,
      `${file}:17:5  issuers[0].client_secret: unknown key`,
      `${file}:17:20  issuers[0].client_secret: \${MISSING_SECRET} is not set`,
    ])
  })

  it('prints the file name as given on the command line', async () => {
    const file = writeTemp('tie.yaml', `${GOOD}  - id: again
    path: "/**"
    upstream: main
`)
    const relative = path.relative(process.cwd(), file)
    const run = await portcullis(['check', '--config', relative])
    expect(run.code).toBe(1)
    expect(run.stderr).toBe(`${relative}:9:11  routes[1].path: ties with routes[0] ("all"): same path shape and overlapping methods\n`)
  })

  it('reports a YAML syntax error with its line', async () => {
    const file = writeTemp('syntax.yaml', 'upstreams:\n  main: [1, 2\nroutes: []\n')
    const run = await portcullis(['check', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(new RegExp(`^${escape(file)}:3:1  Flow sequence .+\\n$`))
  })

  it('reports a file that does not exist at 1:1', async () => {
    const file = path.join(tmpdir(), 'portcullis-no-such-file.yaml')
    const run = await portcullis(['check', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(new RegExp(`^${escape(file)}:1:1  cannot read the file: ENOENT`))
  })

  it('substitutes ${VAR} from the environment it runs in', async () => {
    const file = writeTemp('env.yaml', GOOD.replace('http://127.0.0.1:9001', '${UPSTREAM_URL}'))
    expect((await portcullis(['check', '--config', file], { env: { UPSTREAM_URL: 'http://127.0.0.1:1' } })).code).toBe(0)
    const run = await portcullis(['check', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stderr).toBe(`${file}:3:10  upstreams.main.url: \${UPSTREAM_URL} is not set\n`)
  })

  it('prints a warning for a non-loopback listen without tls, and still exits 0', async () => {
    const file = writeTemp('open.yaml', `${GOOD}server:\n  listen: "0.0.0.0:8080"\n`)
    const run = await portcullis(['check', '--config', file])
    expect(run).toEqual({
      code: 0,
      stdout: `${file}: warning: server.listen 0.0.0.0:8080 is not loopback and server.tls is not set: tokens would cross the network in clear text\n` +
        `${file}: OK\n`,
      stderr: '',
    })
  })

  it('prints a warning for an http:// issuer and jwks_uri off loopback once server.allow_insecure_http allows them, and still exits 0', async () => {
    const file = writeTemp('http-issuer.yaml', `${GOOD}server:\n  allow_insecure_http: true\nissuers:
  - issuer: "http://idp.example.com/"
    jwks_uri: "http://keys.example.com/jwks"
    audience: ["orders-api"]
  - issuer: "http://127.0.0.1:9000/"
    jwks_uri: "http://127.0.0.1:9000/jwks"
    audience: ["orders-api"]
`)
    const run = await portcullis(['check', '--config', file])
    expect(run).toEqual({
      code: 0,
      stdout: `${file}: warning: issuers[0].issuer uses http:// off loopback (idp.example.com): keys or tokens can be tampered with in transit\n` +
        `${file}: warning: issuers[0].jwks_uri uses http:// off loopback (keys.example.com): keys or tokens can be tampered with in transit\n` +
        `${file}: OK\n`,
      stderr: '',
    })
  })

  it('prints no warning for https:// and loopback settings', async () => {
    const file = writeTemp('quiet.yaml', `${GOOD}server:\n  listen: "[::1]:8080"\nissuers:
  - issuer: "https://idp.example.com/"
    jwks_uri: "https://idp.example.com/jwks"
    audience: ["orders-api"]
`)
    expect(await portcullis(['check', '--config', file])).toEqual({ code: 0, stdout: `${file}: OK\n`, stderr: '' })
  })
})

describe('portcullis hash-secret', () => {
  it('prints one scrypt$ line that verifies the secret read from stdin, trailing newline dropped', async () => {
    const run = await portcullis(['hash-secret'], { stdin: 's3cret-value\n' })
    expect(run.code).toBe(0)
    expect(run.stderr).toBe('')
    expect(run.stdout).toMatch(/^scrypt\$[^\s]+\n$/)
    const hash = run.stdout.trimEnd()
    expect(await verifySecret('s3cret-value', hash)).toBe(true)
    expect(await verifySecret('s3cret-value\n', hash)).toBe(false)
    expect(await verifySecret('wrong-value', hash)).toBe(false)
  })

  it('drops a CRLF line ending too, but only the last one', async () => {
    const hash = (await portcullis(['hash-secret'], { stdin: 'two\nlines\r\n' })).stdout.trimEnd()
    expect(await verifySecret('two\nlines', hash)).toBe(true)
  })

  it('salts every hash, so the same secret hashes differently', async () => {
    const [first, second] = await Promise.all([
      portcullis(['hash-secret'], { stdin: 'same' }),
      portcullis(['hash-secret'], { stdin: 'same' }),
    ])
    expect(first.stdout).not.toBe(second.stdout)
    expect(await verifySecret('same', first.stdout.trimEnd())).toBe(true)
  })

  it('refuses an empty secret', async () => {
    const run = await portcullis(['hash-secret'], { stdin: '\n' })
    expect(run.code).toBe(1)
    expect(run.stdout).toBe('')
    expect(run.stderr).toBe('hash-secret: the secret on standard input is empty\n')
  })
})

describe('usage errors: exit 2, one line on stderr, nothing on stdout', () => {
  const usageError = (run: CliRun, line: string | RegExp) => {
    expect(run.code).toBe(2)
    expect(run.stdout).toBe('')
    expect(run.stderr.endsWith('\n')).toBe(true)
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1)
    expect(run.stderr.trimEnd()).toMatch(line)
  }

  it('an unknown command', async () => {
    usageError(await portcullis(['frobnicate']), 'portcullis: unknown command: frobnicate (see portcullis --help)')
  })

  it('no command', async () => {
    usageError(await portcullis([]), /^portcullis: a command is required: start, check, hash-secret, keys rotate or keys rekey/)
  })

  it.each([
    [['check', '--frobnicate'], 'check: unknown option --frobnicate (see portcullis check --help)'],
    [['start', '--port', '80'], 'start: unknown option --port (see portcullis start --help)'],
    [['keys', 'rotate', '-f'], 'keys rotate: unknown option -f (see portcullis keys rotate --help)'],
    [['--frobnicate', 'check'], 'check: unknown option --frobnicate (see portcullis check --help)'],
    [['--frobnicate'], 'portcullis: unknown option --frobnicate (see portcullis --help)'],
  ])('an unknown option: portcullis %j', async (args, line) => {
    usageError(await portcullis(args), line)
  })

  it('an option the command does not take (hash-secret reads no config)', async () => {
    usageError(await portcullis(['hash-secret', '--config', 'x.yaml']), 'hash-secret: unknown option --config (see portcullis hash-secret --help)')
  })

  it('an option without its value', async () => {
    usageError(await portcullis(['check', '--config']), /^check: option '-c, --config <value>' argument missing/)
  })

  it('an extra argument', async () => {
    usageError(await portcullis(['check', 'config/portcullis.yaml']), 'check: unexpected argument: config/portcullis.yaml (see portcullis check --help)')
    usageError(await portcullis(['keys', 'rotate', 'now']), 'keys rotate: unexpected argument: now (see portcullis keys rotate --help)')
  })

  it('keys without rotate or rekey, or with another verb', async () => {
    usageError(await portcullis(['keys']), /^portcullis: unknown keys command: \(none\); they are keys rotate and keys rekey/)
    usageError(await portcullis(['keys', 'list']), /^portcullis: unknown keys command: list; they are keys rotate and keys rekey/)
    usageError(await portcullis(['keys', 'rekey', 'c2VjcmV0']), 'keys rekey: unexpected argument: c2VjcmV0 (see portcullis keys rekey --help)')
  })
})

describe('--help and --version', () => {
  it('--help prints every command and the exit statuses on stdout, exit 0', async () => {
    for (const flag of ['--help', '-h']) {
      const run = await portcullis([flag])
      expect(run).toMatchObject({ code: 0, stderr: '' })
      expect(run.stdout).toMatch(/^usage: portcullis <command>/)
      for (const command of ['start', 'check', 'hash-secret', 'keys rotate', 'keys rekey']) expect(run.stdout).toContain(`\n  ${command} `)
      expect(run.stdout).toMatch(/exit status:\n {2}0 .+\n {2}1 .+\n {2}2 {2}usage error/)
    }
  })

  it.each([
    [['start', '--help'], 'start [--config FILE]'],
    [['check', '--help'], 'check [--config FILE]'],
    [['hash-secret', '--help'], 'hash-secret < secret.txt'],
    [['keys', 'rotate', '--help'], 'keys rotate [--config FILE]'],
    [['keys', '--help'], 'keys rotate [--config FILE]'],
    [['keys', 'rekey', '--help'], 'keys rekey [--config FILE] < new-key.txt'],
    [['check', '-h', '--config', 'whatever.yaml'], 'check [--config FILE]'],
  ])('portcullis %j prints that command\'s usage and exit statuses, exit 0', async (args, usage) => {
    const run = await portcullis(args)
    expect(run).toMatchObject({ code: 0, stderr: '' })
    expect(run.stdout.split('\n')[0]).toBe(`usage: portcullis ${usage}`)
    expect(run.stdout).toMatch(/\nexit status:\n {2}0 {2}.+\n {2}1 {2}.+(\n {5}.+)*\n {2}2 {2}usage error\n$/)
  })

  it('start --help does not start anything, even with a config that would', async () => {
    const run = await portcullis(['start', '--help', '--config', 'config/portcullis.yaml'])
    expect(run.code).toBe(0)
    expect(run.stdout).toContain('SIGTERM')
  })

  it('--version prints the version of package.json, from any working directory', async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }
    expect(await portcullis(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' })
    expect(await portcullis(['--version'], { cwd: tmpdir() })).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' })
    expect(await portcullis(['start', '--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' })
  })
})

describe('PORTCULLIS_CONFIG', () => {
  it('is the config file when no --config is given; --config wins over it', async () => {
    const file = writeTemp('env-default.yaml', GOOD)
    expect(await portcullis(['check'], { env: { PORTCULLIS_CONFIG: file } })).toEqual({ code: 0, stdout: `${file}: OK\n`, stderr: '' })
    const run = await portcullis(['check', '--config', 'config/portcullis.yaml'], { env: { PORTCULLIS_CONFIG: '/nonexistent.yaml' } })
    expect(run).toEqual({ code: 0, stdout: DEFAULT_CONFIG_OK, stderr: '' })
  })
})

/** A config serving the built-in echo API with no auth on `port`, the admin listener on `adminPort`. */
const serving = (port: number, adminPort: number, log = 'log:\n  level: warn\n') => `server:
  listen: "127.0.0.1:${port}"
admin:
  listen: "127.0.0.1:${adminPort}"
upstreams:
  echo:
    url: "builtin:echo"
routes:
  - id: all
    path: "/**"
    upstream: echo
    auth: none
${log}`

describe('portcullis start: exit statuses', () => {
  const config = (port: number, adminPort: number) => serving(port, adminPort)

  it('exits 1 with one line per problem for an invalid config', async () => {
    const file = writeTemp('bad-start.yaml', 'upstreams: {}\nroutes: []\nserver:\n  listen: nowhere\n')
    const run = await portcullis(['start', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stdout).toBe('')
    const lines = run.stderr.trimEnd().split('\n')
    expect(lines.length).toBeGreaterThan(1)
    for (const line of lines) expect(line).toMatch(new RegExp(`^${escape(file)}:\\d+:\\d+  `))
  })

  it('exits 1 with one line, no stack trace, when the admin port is taken (the public listener already open)', async ({ onTestFinished }) => {
    const taken = http.createServer()
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => taken.close(() => resolve())))
    const adminPort = (taken.address() as AddressInfo).port
    const file = writeTemp('taken.yaml', config(await closedPort(), adminPort))
    const run = await portcullis(['start', '--config', file])
    expect(run.code).toBe(1)
    expect(run.stderr).toBe(`start: listen EADDRINUSE: address already in use 127.0.0.1:${adminPort}\n`)
  })

  it('exits 0 on SIGTERM once it has drained', async ({ onTestFinished }) => {
    const adminPort = await closedPort()
    const file = writeTemp('serve.yaml', config(await closedPort(), adminPort))
    const running = spawnProcess(process.execPath, [CLI, 'start', '--config', file], { env: { PATH: process.env.PATH } })
    onTestFinished(() => running.kill())
    await waitFor('/healthz', async () => (await fetch(`http://127.0.0.1:${adminPort}/healthz`)).status === 200)
    running.child.kill('SIGTERM')
    expect(await running.exited).toEqual({ code: 0, signal: null })
    expect(running.output().stderr).toBe('')
  })
})

describe('portcullis start: a buffered request log (log.buffer)', () => {
  const config = (port: number, adminPort: number, buffer: string, flushInterval: string) =>
    serving(port, adminPort, `log:\n  level: info\n  buffer: ${buffer}\n  flush_interval: ${flushInterval}\n`)

  /** `portcullis start` on free ports, its public URL once /healthz answers. */
  async function start(onTestFinished: (fn: () => void) => void, buffer: string, flushInterval: string) {
    const port = await closedPort()
    const adminPort = await closedPort()
    const file = writeTemp('buffered.yaml', config(port, adminPort, buffer, flushInterval))
    const running = spawnProcess(process.execPath, [CLI, 'start', '--config', file], { env: { PATH: process.env.PATH } })
    onTestFinished(() => running.kill())
    await waitFor('/healthz', async () => (await fetch(`http://127.0.0.1:${adminPort}/healthz`)).status === 200)
    return { running, url: `http://127.0.0.1:${port}` }
  }

  const requestLine = (stdout: string, path: string) => stdout.split('\n').find((line) => line.includes(`"path":"${path}"`))

  it('holds request lines back while the buffer has room and flush_interval has not passed, and writes them all on SIGTERM', async ({ onTestFinished }) => {
    const { running, url } = await start(onTestFinished, '8kb', '1m')
    for (const path of ['/one', '/two', '/three']) expect((await fetch(`${url}${path}`)).status).toBe(200)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(requestLine(running.output().stdout, '/one')).toBeUndefined()
    running.child.kill('SIGTERM')
    expect(await running.exited).toEqual({ code: 0, signal: null })
    for (const path of ['/one', '/two', '/three']) {
      expect(JSON.parse(requestLine(running.output().stdout, path)!)).toMatchObject({ msg: 'request', path, status: 200 })
    }
  })

  it('writes what it holds every flush_interval, without waiting for the buffer to fill', async ({ onTestFinished }) => {
    const { running, url } = await start(onTestFinished, '8kb', '100ms')
    expect((await fetch(`${url}/flushed`)).status).toBe(200)
    await waitFor('the request line', async () => requestLine(running.output().stdout, '/flushed') !== undefined, 3000)
    expect(running.child.exitCode).toBeNull()
  })

  it('writes the lines as soon as they fill the buffer', async ({ onTestFinished }) => {
    const { running, url } = await start(onTestFinished, '1kb', '1m')
    for (let i = 0; i < 20; i++) expect((await fetch(`${url}/fill/${i}`)).status).toBe(200)
    // 20 lines are several KiB: the buffer has been written out at least once, long before a minute.
    await waitFor('a request line', async () => requestLine(running.output().stdout, '/fill/0') !== undefined, 3000)
  })
})

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
