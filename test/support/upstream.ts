/** A real HTTP server on 127.0.0.1:0 that records every request it gets (and, optionally, speaks WebSocket). */
import { createHash } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { WebSocketServer } from 'ws'

export interface RecordedRequest {
  method: string
  url: string
  headers: http.IncomingHttpHeaders
  rawHeaders: string[]
  bodyBytes: number
  bodySha256: string
}

export interface RecordingUpstream {
  url: string
  port: number
  requests: RecordedRequest[]
  /** Upgrade requests the WebSocket server accepted. */
  upgrades: http.IncomingHttpHeaders[]
  /** Requests whose body never completed (the sender aborted mid-body): what had arrived by then. */
  incomplete: Array<{ method: string; url: string; bodyBytes: number }>
  /** Request body bytes received so far, over all requests (also while a body is still arriving). */
  readonly bodyBytesReceived: number
  /** TCP connections accepted so far (TLS ones included). */
  readonly connections: number
  /** Max resident heap growth seen while a body streamed in (bytes), for streaming assertions. */
  close(): Promise<void>
}

export interface UpstreamOptions {
  /** Requests to a path starting with /slow wait this long before answering. */
  slowMs?: number
  tls?: { cert: string | Buffer; key: string | Buffer }
  /** Extra headers on every (non-upgrade) response, e.g. hop-by-hop ones the gateway must drop. */
  responseHeaders?: http.OutgoingHttpHeaders
}

export async function startRecordingUpstream(options: UpstreamOptions = {}): Promise<RecordingUpstream> {
  const requests: RecordedRequest[] = []
  const upgrades: http.IncomingHttpHeaders[] = []
  const incomplete: RecordingUpstream['incomplete'] = []
  let bodyBytesReceived = 0
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const hash = createHash('sha256')
    let bodyBytes = 0
    req.on('data', (chunk: Buffer) => { bodyBytes += chunk.length; bodyBytesReceived += chunk.length; hash.update(chunk) })
    req.on('close', () => { if (!req.complete) incomplete.push({ method: req.method!, url: req.url!, bodyBytes }) })
    req.on('end', () => {
      requests.push({
        method: req.method!, url: req.url!, headers: req.headers, rawHeaders: req.rawHeaders,
        bodyBytes, bodySha256: hash.digest('hex'),
      })
      const answer = () => {
        const body = JSON.stringify({ ok: true, url: req.url, bodyBytes })
        res.writeHead(200, {
          'content-type': 'application/json',
          'x-upstream': 'recording',
          connection: 'keep-alive, x-upstream-private',
          'x-upstream-private': 'hop-by-hop',
          'set-cookie': ['a=1', 'b=2'],
          ...options.responseHeaders,
        })
        res.end(body)
      }
      if (req.url!.startsWith('/slow') && options.slowMs) setTimeout(answer, options.slowMs)
      else answer()
    })
  }
  const server = options.tls ? https.createServer(options.tls, handler) : http.createServer(handler)
  const wss = new WebSocketServer({ noServer: true })
  server.on('upgrade', (req, socket, head) => {
    upgrades.push(req.headers)
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.send(JSON.stringify({ hello: true, subject: req.headers['x-auth-subject'] ?? null }))
      ws.on('message', (data) => ws.send(`echo:${data.toString()}`))
    })
  })
  let connections = 0
  server.on(options.tls ? 'secureConnection' : 'connection', () => { connections++ })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    port,
    requests,
    upgrades,
    incomplete,
    get bodyBytesReceived() { return bodyBytesReceived },
    get connections() { return connections },
    close: async () => {
      for (const client of wss.clients) client.terminate()
      wss.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** A port on which nothing listens (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** Listens on 127.0.0.1:0 until the test ends (its connections closed then too); returns the port. */
export async function listenForTest(server: http.Server, context: { onTestFinished(fn: () => Promise<void>): void }): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  context.onTestFinished(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return (server.address() as AddressInfo).port
}
