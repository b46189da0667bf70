#!/usr/bin/env node
// Scenario (b) of bench/run.mjs, the baseline every other scenario is compared with: a bare fastify +
// @fastify/http-proxy with no auth (the fastify and undici versions Portcullis uses, logger off)
// forwarding every request to the upstream.
//
//   node bench/bare-proxy.mjs http://127.0.0.1:<upstream port>
//
// Listens on 127.0.0.1 on a port chosen by the OS and prints {"port":N} on stdout once listening.
import Fastify from 'fastify'
import proxy from '@fastify/http-proxy'

const upstream = process.argv[2]
if (upstream === undefined) {
  console.error('usage: bare-proxy.mjs UPSTREAM_URL')
  process.exit(2)
}
const app = Fastify({ logger: false })
await app.register(proxy, { upstream, prefix: '/' })
await app.listen({ host: '127.0.0.1', port: 0 })
console.log(JSON.stringify({ port: app.server.address().port }))
process.on('SIGTERM', () => { app.close().then(() => process.exit(0)) })
