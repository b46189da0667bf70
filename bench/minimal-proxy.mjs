#!/usr/bin/env node
// The (floor) row of bench/run.mjs: about the least a reverse proxy on Node can do per request, for scale. A
// node:http server forwarding every request on an undici Pool with a dispatch handler (the transport
// Portcullis uses), hop-by-hop headers dropped, X-Forwarded-For set, and nothing else: no routing, no auth,
// no metrics, no logging, no limits. Not a usable proxy; what is left of a request's cost is Node's HTTP
// server, undici and the two socket writes.
//
//   node bench/minimal-proxy.mjs http://127.0.0.1:<upstream port> [PORTCULLIS_CONFIG]
//
// Listens on 127.0.0.1 on a port chosen by the OS and prints {"port":N} on stdout once listening. With a
// config, Portcullis (dist/, as `portcullis start` loads it) is started first in the same process, on the
// config's own listener, and the floor is served beside it: what sharing a process with the gateway does to
// the floor's own code (bench/rows.mjs's `floor-beside-d`). Either way V8's inlining budget stays node's own: the
// CLI raises it (src/server/inlining-budget.ts), this script does not.
import http from 'node:http'
import { Pool } from 'undici'

const [upstream, portcullisConfig] = process.argv.slice(2)
if (upstream === undefined) {
  console.error('usage: minimal-proxy.mjs UPSTREAM_URL [PORTCULLIS_CONFIG]')
  process.exit(2)
}
if (portcullisConfig !== undefined) {
  // In the CLI's order: the tick object is kept before the rest of the program loads (tick-shape.ts).
  await import('../dist/server/tick-shape.js')
  const { runPortcullis } = await import('../dist/server/run.js')
  await runPortcullis(portcullisConfig, { watch: false })
}
const pool = new Pool(upstream, { connections: 128, pipelining: 1 })
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host'])

class Relay {
  constructor(res) { this.res = res }
  onConnect() {}
  onHeaders(status, raw, resume) {
    const headers = []
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i].toString('latin1').toLowerCase()
      if (!HOP_BY_HOP.has(name)) headers.push(name, raw[i + 1].toString('latin1'))
    }
    this.resume = resume
    this.res.writeHead(status, headers)
    return true
  }
  onData(chunk) {
    if (this.res.write(chunk)) return true
    this.res.once('drain', this.resume)
    return false
  }
  onComplete() { this.res.end() }
  onError() {
    if (this.res.headersSent) this.res.destroy()
    else this.res.writeHead(502, { 'content-length': 0 }).end()
  }
}

const server = http.createServer((req, res) => {
  const headers = {}
  for (const name in req.headers) if (!HOP_BY_HOP.has(name)) headers[name] = req.headers[name]
  headers['x-forwarded-for'] = req.socket.remoteAddress
  pool.dispatch({ path: req.url, method: req.method, headers, body: req.method === 'GET' || req.method === 'HEAD' ? null : req }, new Relay(res))
})
server.keepAliveTimeout = 60_000
server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })))
process.on('SIGTERM', () => process.exit(0))
