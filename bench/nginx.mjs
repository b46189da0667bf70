// nginx for bench/run.mjs (issue 23): nginx alone (proxy_pass), and nginx in front of Portcullis's decision
// endpoint with examples/decision/nginx.conf as the docs show it, its decision cache on or off. One nginx
// process (master_process off: the worker is the process measured), its files under the run's directory.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => existsSync(file))
const EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../examples/decision/nginx.conf')
export const EXAMPLE_SECRET = 'change-me-to-decision-trust-secret-of-32+-chars'

function wrap(dir, http) {
  for (const sub of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi', 'cache']) mkdirSync(path.join(dir, sub), { recursive: true })
  return [
    'daemon off;', 'master_process off;', 'worker_processes 1;', `pid ${dir}/nginx.pid;`, `error_log ${dir}/error.log warn;`,
    'events { worker_connections 4096; }',
    'http {',
    '  access_log off;',
    ...['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((sub) => `  ${sub === 'body' ? 'client_body' : sub}_temp_path ${dir}/${sub};`),
    http,
    '}',
  ].join('\n')
}

/** Writes the nginx.conf of a scenario into `dir` and returns its path. */
export function nginxConfig(dir, { port, upstream, decision, cache, secret }) {
  const upstreamHost = new URL(upstream).host
  let http
  if (decision === undefined) {
    http = `
upstream app { server ${upstreamHost}; keepalive 256; keepalive_requests 100000; }
server {
  listen 127.0.0.1:${port};
  location / { proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://app; }
}`
  } else {
    http = readFileSync(EXAMPLE, 'utf8')
    const replacements = [['127.0.0.1:8181', decision], ['127.0.0.1:9001', upstreamHost], [EXAMPLE_SECRET, secret],
      ['listen 80;', `listen 127.0.0.1:${port};`], ['/var/cache/nginx/portcullis', `${dir}/cache`]]
    // Without nginx's decision cache: every request is decided by Portcullis.
    if (!cache) replacements.push(['        proxy_cache portcullis_decisions;\n', ''])
    for (const [from, to] of replacements) {
      if (!http.includes(from)) throw new Error(`examples/decision/nginx.conf no longer contains ${from}`)
      http = http.replaceAll(from, to)
    }
  }
  const file = path.join(dir, 'nginx.conf')
  writeFileSync(file, wrap(dir, http))
  return file
}

/**
 * nginx as a gRPC proxy (bench/grpc.mjs): h2c in, `grpc_pass` to the service's h2c, no auth: the C reference for a
 * gRPC call through a proxy. Writes the config into `dir` and returns its path.
 */
export function grpcNginxConfig(dir, { port, upstream }) {
  const http = `
upstream grpc_service { server ${upstream}; keepalive 64; keepalive_requests 100000; }
server {
  listen 127.0.0.1:${port} http2;
  location / { grpc_pass grpc://grpc_service; }
}`
  const file = path.join(dir, 'nginx.conf')
  writeFileSync(file, wrap(dir, http))
  return file
}
