#!/usr/bin/env node
// Helper processes of bench/run.mjs (not run by hand):
//
//   node bench/servers.mjs upstream        the upstream of every proxy scenario, and scenario (a) itself
//   node bench/servers.mjs introspection   an RFC 7662 introspection endpoint: active:true for every token
//                                          but those starting with `revoked-`
//
// Both listen on 127.0.0.1 on a port chosen by the OS and print {"port":N} on stdout once listening.
import http from 'node:http'
import { fileURLToPath } from 'node:url'

/** The upstream's answer to every request: a ~100-byte JSON (the body the correctness gates expect). */
export const BODY = JSON.stringify({ id: 42, name: 'item', padding: 'x'.repeat(60) })
export const OPAQUE_ISSUER = 'https://opaque.portcullis.invalid/'

export function createUpstream() {
  const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) }
  return http.createServer((req, res) => {
    // …/__echo answers with the request headers it received, so a gate can check what a proxy forwarded.
    if (req.url.endsWith('/__echo')) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(req.headers))
      return
    }
    res.writeHead(200, headers)
    res.end(BODY)
  })
}

export function createIntrospection() {
  return http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk) => { body += chunk })
    req.on('end', () => {
      const token = new URLSearchParams(body).get('token') ?? ''
      res.writeHead(200, { 'content-type': 'application/json' })
      if (token.startsWith('revoked-')) return res.end('{"active":false}')
      res.end(JSON.stringify({
        active: true, sub: `user-${token.slice(-8)}`, client_id: 'bench-client', scope: 'items:read',
        exp: Math.floor(Date.now() / 1000) + 7200, iss: OPAQUE_ISSUER, aud: 'bench',
      }))
    })
  })
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const kinds = { upstream: createUpstream, introspection: createIntrospection }
  const make = kinds[process.argv[2]]
  if (make === undefined) {
    console.error(`usage: servers.mjs ${Object.keys(kinds).join('|')}`)
    process.exit(2)
  }
  const server = make()
  server.keepAliveTimeout = 60_000
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })))
  process.on('SIGTERM', () => process.exit(0))
}
