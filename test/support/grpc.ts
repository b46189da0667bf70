/**
 * A gRPC service made with @grpc/grpc-js (the test's upstream, cleartext HTTP/2 or TLS) and clients of it made
 * by the same library: nothing of the gRPC protocol here is ours.
 */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'

// The example's own service definition (examples/grpc/): what the README runs is what the tests call.
const PROTO = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'grpc', 'echo.proto')

export interface Note { text: string }

/** One call the service received: its method and the metadata (request headers) it came with. */
export interface ReceivedCall {
  method: string
  metadata: Record<string, unknown>
}

export interface GrpcUpstream {
  /** `http://127.0.0.1:PORT` (cleartext) or `https://…` (TLS), for `upstreams.<name>.url`. */
  url: string
  calls: ReceivedCall[]
  close(): Promise<void>
}

type EchoClient = grpc.Client & {
  Unary(note: Note, metadata: grpc.Metadata, callback: (error: grpc.ServiceError | null, note?: Note) => void): grpc.ClientUnaryCall
  Admin(note: Note, metadata: grpc.Metadata, callback: (error: grpc.ServiceError | null, note?: Note) => void): grpc.ClientUnaryCall
  Countdown(note: Note, metadata?: grpc.Metadata): grpc.ClientReadableStream<Note>
  Collect(metadata: grpc.Metadata, callback: (error: grpc.ServiceError | null, note?: Note) => void): grpc.ClientWritableStream<Note>
  Chat(metadata?: grpc.Metadata): grpc.ClientDuplexStream<Note, Note>
}

function echoService(): { service: grpc.ServiceDefinition; Client: new (address: string, credentials: grpc.ChannelCredentials) => EchoClient } {
  const definition = protoLoader.loadSync(PROTO, { keepCase: true })
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    portcullis: { test: { Echo: grpc.ServiceClientConstructor } }
  }
  const Echo = loaded.portcullis.test.Echo
  return { service: Echo.service, Client: Echo as unknown as new (address: string, credentials: grpc.ChannelCredentials) => EchoClient }
}

export function echoClient(address: string, credentials: grpc.ChannelCredentials): EchoClient {
  return new (echoService().Client)(address, credentials)
}

/**
 * The Echo service: Unary and Admin answer `echo: <text>`, Countdown streams `text` as a number down to 1 (a
 * message every `intervalMs`), Collect joins what it was sent, Chat answers each message as it comes.
 */
export async function startGrpcUpstream(options: { credentials?: grpc.ServerCredentials; intervalMs?: number } = {}): Promise<GrpcUpstream> {
  const calls: ReceivedCall[] = []
  const server = new grpc.Server()
  const note = (method: string, metadata: grpc.Metadata) => calls.push({ method, metadata: metadata.getMap() })
  const interval = options.intervalMs ?? 10
  server.addService(echoService().service, {
    Unary: (call: grpc.ServerUnaryCall<Note, Note>, callback: grpc.sendUnaryData<Note>) => {
      note('Unary', call.metadata)
      callback(null, { text: `echo: ${call.request.text}` })
    },
    Admin: (call: grpc.ServerUnaryCall<Note, Note>, callback: grpc.sendUnaryData<Note>) => {
      note('Admin', call.metadata)
      callback(null, { text: `admin: ${call.request.text}` })
    },
    Countdown: (call: grpc.ServerWritableStream<Note, Note>) => {
      note('Countdown', call.metadata)
      let left = Number(call.request.text)
      const timer = setInterval(() => {
        if (call.cancelled) { clearInterval(timer); return }
        call.write({ text: String(left) })
        if (--left <= 0) { clearInterval(timer); call.end() }
      }, interval)
    },
    Collect: (call: grpc.ServerReadableStream<Note, Note>, callback: grpc.sendUnaryData<Note>) => {
      note('Collect', call.metadata)
      const texts: string[] = []
      call.on('data', (message: Note) => texts.push(message.text))
      call.on('end', () => callback(null, { text: texts.join('+') }))
    },
    Chat: (call: grpc.ServerDuplexStream<Note, Note>) => {
      note('Chat', call.metadata)
      call.on('data', (message: Note) => call.write({ text: `re: ${message.text}` }))
      call.on('end', () => call.end())
    },
  })
  const credentials = options.credentials ?? grpc.ServerCredentials.createInsecure()
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', credentials, (error, bound) => (error ? reject(error) : resolve(bound)))
  })
  const scheme = options.credentials ? 'https' : 'http'
  return {
    url: `${scheme}://127.0.0.1:${port}`,
    calls,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  }
}

/** A unary call's answer, or the error grpc-js reports (its code and details, as an application sees them). */
export function unary(call: (callback: (error: grpc.ServiceError | null, note?: Note) => void) => void): Promise<{ note?: Note; error?: grpc.ServiceError }> {
  return new Promise((resolve) => call((error, note) => resolve(error ? { error } : { note: note! })))
}

export { grpc }
