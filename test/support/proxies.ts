/**
 * The proxies teams already run, from Debian's packages (issue 23): nginx (nginx-light has auth_request) and
 * Caddy (forward_auth), each started on 127.0.0.1 from a config the test writes, in a temp dir of its own.
 * `.ci/run` installs both; where a binary is absent the tests that need it are skipped and say why.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { closedPort } from './upstream.js'

export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => existsSync(file))
export const CADDY = ['/usr/bin/caddy', '/usr/local/bin/caddy'].find((file) => existsSync(file))

export interface RunningProxy {
  url: string
  port: number
  /** What the proxy wrote to its error log or stderr so far. */
  output(): string
  close(): Promise<void>
}

async function waitForPort(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the proxy exited (${child.exitCode}): ${output()}`)
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true) })
      socket.on('error', () => resolve(false))
    })
    if (open) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`the proxy did not listen on ${port}: ${output()}`)
}

function run(command: string, args: string[], dir: string, port: number, env: NodeJS.ProcessEnv = process.env, log?: string): Promise<RunningProxy> {
  let stderr = ''
  const child = spawn(command, args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout!.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const output = () => stderr + (log !== undefined && existsSync(log) ? readFileSync(log, 'utf8') : '')
  const close = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGTERM')
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  }
  return waitForPort(port, child, output).then(
    () => ({ url: `http://127.0.0.1:${port}`, port, output, close }),
    async (error: unknown) => { await close(); throw error })
}

/**
 * nginx in the foreground, one process, everything it writes under a temp dir. `http` is the body of the
 * `http {}` block; `{PORT}` and `{DIR}` in it are replaced by the port it listens on and that dir.
 */
export async function startNginx(http: string): Promise<RunningProxy> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-nginx-'))
  for (const sub of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi', 'cache']) mkdirSync(path.join(dir, sub))
  const port = await closedPort()
  const log = path.join(dir, 'error.log')
  const conf = [
    'daemon off;', 'master_process off;', 'worker_processes 1;', `pid ${dir}/nginx.pid;`, `error_log ${log} warn;`,
    'events { worker_connections 256; }',
    'http {',
    '  access_log off;',
    ...['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((sub) => `  ${sub === 'body' ? 'client_body' : sub}_temp_path ${dir}/${sub};`),
    http.replaceAll('{PORT}', String(port)).replaceAll('{DIR}', dir),
    '}',
  ].join('\n')
  writeFileSync(path.join(dir, 'nginx.conf'), conf)
  return run(NGINX!, ['-p', dir, '-c', path.join(dir, 'nginx.conf')], dir, port, process.env, log)
}

/** Caddy with a Caddyfile (`{PORT}` replaced); no admin endpoint, no automatic HTTPS, its state in a temp dir. */
export async function startCaddy(caddyfile: string): Promise<RunningProxy> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-caddy-'))
  const port = await closedPort()
  writeFileSync(path.join(dir, 'Caddyfile'), `{\n\tadmin off\n\tauto_https off\n}\n${caddyfile.replaceAll('{PORT}', String(port))}`)
  const env = { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir }
  return run(CADDY!, ['run', '--config', path.join(dir, 'Caddyfile'), '--adapter', 'caddyfile'], dir, port, env)
}

/** The version a binary reports, for the test names. */
export function versionOf(binary: string | undefined, args: string[]): string {
  if (binary === undefined) return 'absent'
  const result = spawnSync(binary, args, { encoding: 'utf8' })
  return `${result.stdout}${result.stderr}`.trim().split('\n')[0] ?? 'unknown'
}
