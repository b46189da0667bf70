/**
 * A real RFC 7662 introspection endpoint on 127.0.0.1:0. It authenticates its client the way an
 * authorization server does (RFC 6749 §2.3.1: HTTP Basic with form-encoded id and secret, or both in the
 * form body), records every call and how the client authenticated, and answers each token from a map the
 * test changes at run time: a JSON body, any status, text that is not JSON, or an answer held back longer
 * than the gateway waits. It can be stopped and started again on the same port.
 */
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'

/** How one token is answered. `json` and `text` are exclusive; without either the body is empty. */
export interface IntrospectionAnswer {
  /** Default 200. */
  status?: number
  /** Sent as `application/json`. */
  json?: unknown
  /** Sent as is (e.g. an HTML error page), with `contentType` (default `text/html`). */
  text?: string
  contentType?: string
  /** Milliseconds to wait before answering. */
  delayMs?: number
  /** Answer only once this settles (for tests that act while a call is in flight). */
  holdUntil?: Promise<unknown>
}

export type ClientAuthMethod = 'client_secret_basic' | 'client_secret_post' | 'none' | 'both'

export interface IntrospectionCall {
  method: string
  path: string
  contentType: string | undefined
  accept: string | undefined
  /** The raw Authorization header, when there was one. */
  authorization: string | undefined
  /** How the client authenticated, as this server read the request. */
  authMethod: ClientAuthMethod
  /** The client credentials, decoded (Basic: base64, then form-decoding of each half). */
  clientId: string | undefined
  clientSecret: string | undefined
  /** Whether the credentials were the expected ones. */
  authenticated: boolean
  /** The form body, decoded. */
  form: Record<string, string>
  token: string | undefined
  tokenTypeHint: string | undefined
}

export interface TestIntrospectionServer {
  /** `http://127.0.0.1:<port>/introspect` (https with `tls`) */
  endpoint: string
  port: number
  clientId: string
  clientSecret: string
  /** Every request received, in order (including refused ones). */
  calls: IntrospectionCall[]
  /** How many requests were received. */
  readonly callCount: number
  /** Per-token answers; change them at any time. */
  answers: Map<string, IntrospectionAnswer>
  /** The answer for a token not in `answers` (default `{ json: { active: false } }`). */
  fallback: IntrospectionAnswer
  /** Sets the answer for one token (a plain object is a 200 JSON body). */
  answer(token: string, answer: IntrospectionAnswer): void
  answerJson(token: string, body: Record<string, unknown>): void
  /** Resolves once `count` calls in total have been received. */
  waitForCalls(count: number): Promise<void>
  readonly running: boolean
  /** Stops listening and drops open connections and held answers; `start()` listens on the same port again. */
  stop(): Promise<void>
  start(): Promise<void>
  close(): Promise<void>
}

export interface IntrospectionServerOptions {
  clientId?: string
  clientSecret?: string
  path?: string
  /** Serve HTTPS with this certificate (e.g. one from test/support/tls.ts). */
  tls?: { cert: string | Buffer; key: string | Buffer }
}

/** application/x-www-form-urlencoded decoding of one value (RFC 6749 Appendix B). */
function formDecode(value: string): string {
  return decodeURIComponent(value.replace(/\+/g, ' '))
}

/** RFC 6749 §2.3.1 / RFC 7617: base64(form-encoded id ":" form-encoded secret). */
function readBasic(header: string | undefined): { clientId: string; clientSecret: string } | undefined {
  const match = /^Basic ([A-Za-z0-9+/]+=*)$/i.exec(header ?? '')
  if (!match) return undefined
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8')
  const colon = decoded.indexOf(':')
  if (colon === -1) return undefined
  try {
    return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) }
  } catch {
    return undefined
  }
}

export async function startIntrospectionServer(options: IntrospectionServerOptions = {}): Promise<TestIntrospectionServer> {
  const expectedId = options.clientId ?? 'portcullis-gateway'
  const expectedSecret = options.clientSecret ?? 'introspection-secret-7b1d9e'
  const endpointPath = options.path ?? '/introspect'
  const waiters: Array<{ count: number; resolve: () => void }> = []
  const timers = new Set<NodeJS.Timeout>()
  let server: http.Server | undefined
  let port = 0

  const send = (res: http.ServerResponse, answer: IntrospectionAnswer) => {
    if (res.destroyed) return
    const status = answer.status ?? 200
    if (answer.json !== undefined) {
      res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
      res.end(JSON.stringify(answer.json))
    } else if (answer.text !== undefined) {
      res.writeHead(status, { 'content-type': answer.contentType ?? 'text/html' })
      res.end(answer.text)
    } else {
      res.writeHead(status).end()
    }
  }

  const handle = (req: http.IncomingMessage, res: http.ServerResponse, body: string) => {
    const form = Object.fromEntries(new URLSearchParams(body))
    const basic = readBasic(req.headers.authorization)
    const inForm = form.client_id !== undefined || form.client_secret !== undefined
    const authMethod: ClientAuthMethod = basic && inForm ? 'both' : basic ? 'client_secret_basic' : inForm ? 'client_secret_post' : 'none'
    const clientId = basic?.clientId ?? form.client_id
    const clientSecret = basic?.clientSecret ?? form.client_secret
    // RFC 6749 §2.3: one authentication method per request.
    const authenticated = authMethod !== 'both' && clientId === expectedId && clientSecret === expectedSecret
    const call: IntrospectionCall = {
      method: req.method ?? '',
      path: req.url ?? '',
      contentType: req.headers['content-type'],
      accept: req.headers.accept,
      authorization: req.headers.authorization,
      authMethod,
      clientId,
      clientSecret,
      authenticated,
      form,
      token: form.token,
      tokenTypeHint: form.token_type_hint,
    }
    state.calls.push(call)
    for (const waiter of [...waiters]) {
      if (state.calls.length >= waiter.count) {
        waiters.splice(waiters.indexOf(waiter), 1)
        waiter.resolve()
      }
    }
    if (req.method !== 'POST' || req.url !== endpointPath) {
      send(res, { status: 404, json: { error: 'not_found' } })
      return
    }
    if (!authenticated) {
      res.setHeader('www-authenticate', 'Basic realm="introspection"')
      send(res, { status: 401, json: { error: 'invalid_client' } })
      return
    }
    if (form.token === undefined) {
      send(res, { status: 400, json: { error: 'invalid_request' } })
      return
    }
    const answer = state.answers.get(form.token) ?? state.fallback
    const reply = () => send(res, answer)
    const delayed = () => {
      if (!answer.delayMs) return reply()
      const timer = setTimeout(() => { timers.delete(timer); reply() }, answer.delayMs)
      timers.add(timer)
    }
    if (answer.holdUntil) void answer.holdUntil.then(delayed, delayed)
    else delayed()
  }

  const listen = async () => {
    const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
      const chunks: Buffer[] = []
      req.on('data', (chunk: Buffer) => chunks.push(chunk))
      req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')))
    }
    const created = options.tls ? https.createServer(options.tls, onRequest) : http.createServer(onRequest)
    await new Promise<void>((resolve, reject) => {
      created.once('error', reject)
      created.listen(port, '127.0.0.1', () => { created.off('error', reject); resolve() })
    })
    server = created
    port = (created.address() as AddressInfo).port
  }

  const stop = async () => {
    const current = server
    if (!current) return
    server = undefined
    for (const timer of timers) clearTimeout(timer)
    timers.clear()
    current.closeAllConnections()
    await new Promise<void>((resolve) => current.close(() => resolve()))
  }

  await listen()
  const state: TestIntrospectionServer = {
    endpoint: `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}${endpointPath}`,
    port,
    clientId: expectedId,
    clientSecret: expectedSecret,
    calls: [],
    get callCount() { return state.calls.length },
    answers: new Map(),
    fallback: { json: { active: false } },
    answer: (token, answer) => { state.answers.set(token, answer) },
    answerJson: (token, body) => { state.answers.set(token, { json: body }) },
    waitForCalls: (count) => new Promise<void>((resolve) => {
      if (state.calls.length >= count) resolve()
      else waiters.push({ count, resolve })
    }),
    get running() { return server !== undefined },
    stop,
    start: async () => { if (!server) await listen() },
    close: stop,
  }
  return state
}
