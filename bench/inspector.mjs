// A minimal Chrome DevTools Protocol client for the benches: a process started with `--inspect=127.0.0.1:0`
// prints "Debugger listening on ws://…" on stderr; `attachInspector(child)` reads that address and returns
// `send(method, params)`. The benches use it to collect a process's garbage before reading its RSS
// (HeapProfiler.collectGarbage: a full collection that also gives the young generation's pages back), and to
// evaluate an expression in it (Runtime.evaluate with node's command-line API, which has `require`), so that what
// they measure is read the same way in Portcullis and in a bare node:http server, with no hook in either.
import { WebSocket } from 'undici'

/** Waits for the child's inspector address on its stderr (passing stderr on), then connects. */
export async function attachInspector(child) {
  const url = await new Promise((resolve, reject) => {
    let text = ''
    child.stderr.on('data', (chunk) => {
      process.stderr.write(chunk)
      text += chunk
      const found = /Debugger listening on (ws:\/\/\S+)/.exec(text)
      if (found) resolve(found[1])
    })
    child.once('exit', () => reject(new Error('the process exited before its inspector listened')))
  })
  const socket = new WebSocket(url)
  await new Promise((resolve, reject) => {
    socket.addEventListener('open', resolve, { once: true })
    socket.addEventListener('error', reject, { once: true })
  })
  let nextId = 1
  const waiting = new Map()
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(String(event.data))
    const answer = waiting.get(message.id)
    if (!answer) return
    waiting.delete(message.id)
    if (message.error) answer.reject(new Error(`${message.error.message}`))
    else answer.resolve(message.result)
  })
  const send = (method, params = {}) => new Promise((resolve, reject) => {
    const id = nextId++
    waiting.set(id, { resolve, reject })
    socket.send(JSON.stringify({ id, method, params }))
  })
  /** The value of `expression` in the process (JSON-serialisable), with `require` available. */
  const evaluate = async (expression) => {
    const { result, exceptionDetails } = await send('Runtime.evaluate', { expression, includeCommandLineAPI: true, returnByValue: true })
    if (exceptionDetails) throw new Error(`evaluate failed: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`)
    return result.value
  }
  return { send, evaluate, collectGarbage: () => send('HeapProfiler.collectGarbage'), close: () => socket.close() }
}
