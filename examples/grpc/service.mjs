// A gRPC service to put Portcullis in front of: examples/grpc/echo.proto's Echo, in cleartext HTTP/2 (h2c).
// It trusts whoever reaches it; Portcullis (examples/grpc/portcullis.yaml) decides who does.
//   node examples/grpc/service.mjs [127.0.0.1:50051]
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'

const address = process.argv[2] ?? '127.0.0.1:50051'
const proto = path.join(path.dirname(fileURLToPath(import.meta.url)), 'echo.proto')
const { Echo } = grpc.loadPackageDefinition(protoLoader.loadSync(proto, { keepCase: true })).portcullis.test

const server = new grpc.Server()
// The identity Portcullis checked arrives as metadata (forward.identity_headers).
const who = (call) => call.metadata.get('x-auth-subject')[0] ?? 'nobody'
server.addService(Echo.service, {
  Unary: (call, done) => done(null, { text: `echo: ${call.request.text} (for ${who(call)})` }),
  Admin: (call, done) => done(null, { text: `admin: ${call.request.text} (for ${who(call)})` }),
  Countdown: (call) => {
    for (let left = Number(call.request.text); left > 0; left--) call.write({ text: String(left) })
    call.end()
  },
  Collect: (call, done) => {
    const texts = []
    call.on('data', (note) => texts.push(note.text)).on('end', () => done(null, { text: texts.join('+') }))
  },
  Chat: (call) => call.on('data', (note) => call.write({ text: `re: ${note.text}` })).on('end', () => call.end()),
})
server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (error, port) => {
  if (error) throw error
  console.log(`Echo service on ${address.replace(/:\d+$/, `:${port}`)} (h2c)`)
})
