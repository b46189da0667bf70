import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { verifySecret } from '../src/crypto/secret-hash.js'
import { CLI, portcullis } from './support/cli.js'


function writeTemp(name: string, text: string): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'portcullis-cli-')), name)
  writeFileSync(file, text)
  return file
}

const GOOD = `upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
  - id: all
    path: "/**"
    upstream: main
`

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it in pretest)')
})

describe('portcullis check', () => {
  it('exits 0 and prints OK for config/portcullis.yaml', async () => {
    const run = await portcullis(['check', '--config', 'config/portcullis.yaml'])
    expect(run).toEqual({ code: 0, stdout: 'config/portcullis.yaml: OK\n', stderr: '' })
  })

  it('checks config/portcullis.yaml when no --config is given', async () => {
    const run = await portcullis(['check'])
    expect(run).toEqual({ code: 0, stdout: 'config/portcullis.yaml: OK\n', stderr: '' })
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
      `${file}:11:7  routes[0].scopes.al: unknown key`,
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

  it('prints a warning for an http:// issuer and jwks_uri off loopback, and still exits 0', async () => {
    const file = writeTemp('http-issuer.yaml', `${GOOD}issuers:
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

describe('usage', () => {
  it('exits 2 with the usage for an unknown command', async () => {
    const run = await portcullis(['frobnicate'])
    expect(run.code).toBe(2)
    expect(run.stderr).toMatch(/^unknown command: frobnicate\n\nusage: portcullis <command>/)
  })

  it('exits 2 with the usage when no command is given', async () => {
    const run = await portcullis([])
    expect(run.code).toBe(2)
    expect(run.stdout).toMatch(/^usage: portcullis <command>/)
  })
})

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
