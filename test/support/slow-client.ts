/** A client that sends a request body slowly, over a raw socket: the abuse the body watch (body-watch.ts) refuses. */
import net from 'node:net'

export interface SlowClient {
  socket: net.Socket
  /** The status line of the answer ('' when the connection failed or closed without one). */
  answer: Promise<string>
}

/**
 * POST `path` declaring `length` bytes of body, sending `first` at once and then one byte every `everyMs`;
 * from `localAddress` when given (a loopback address of its own: a client address of its own to the gateway).
 */
export function slowClient(port: number, options: { path: string; length: number; first: string; everyMs: number; localAddress?: string }): SlowClient {
  const socket = net.connect({ port, host: '127.0.0.1', ...(options.localAddress !== undefined && { localAddress: options.localAddress }) })
  let timer: NodeJS.Timeout | undefined
  const answer = new Promise<string>((resolve) => {
    let text = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => { text += chunk; clearInterval(timer); resolve(text.split('\r\n')[0]!) })
    socket.on('error', () => resolve(''))
    socket.on('close', () => { clearInterval(timer); resolve(text.split('\r\n')[0] ?? '') })
  })
  socket.on('connect', () => {
    socket.write(`POST ${options.path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/octet-stream\r\nContent-Length: ${options.length}\r\n\r\n${options.first}`)
    timer = setInterval(() => { if (!socket.destroyed) socket.write('x') }, options.everyMs)
  })
  return { socket, answer }
}
