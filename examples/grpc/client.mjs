// A gRPC client through Portcullis (examples/grpc/portcullis.yaml): a token for grpc-demo (client_credentials),
// then the Echo service's methods called with it as call metadata, and without it.
//   node examples/grpc/client.mjs [http://127.0.0.1:8080]
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'

const base = new URL(process.argv[2] ?? 'http://127.0.0.1:8080')
const proto = path.join(path.dirname(fileURLToPath(import.meta.url)), 'echo.proto')
const { Echo } = grpc.loadPackageDefinition(protoLoader.loadSync(proto, { keepCase: true })).portcullis.test

async function token(scope) {
  const response = await fetch(new URL('/token', base), {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from('grpc-demo:grpc-demo-secret-change-me').toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope }),
  })
  if (!response.ok) throw new Error(`/token: ${response.status} ${await response.text()}`)
  return (await response.json()).access_token
}

const echo = new Echo(base.host, grpc.credentials.createInsecure())
const call = (method, bearer) => new Promise((resolve) => {
  const metadata = new grpc.Metadata()
  if (bearer) metadata.set('authorization', `Bearer ${bearer}`)
  echo[method]({ text: 'hello' }, metadata, (error, note) => resolve(error ? `${error.code} ${grpc.status[error.code]}: ${error.details}` : note.text))
})

const caller = await token('grpc:call')
console.log(`Unary with a grpc:call token: ${await call('Unary', caller)}`)
console.log(`Unary without a token: ${await call('Unary')}`)
console.log(`Admin with a grpc:call token: ${await call('Admin', caller)}`)
console.log(`Admin with a grpc:admin token: ${await call('Admin', await token('grpc:call grpc:admin'))}`)
echo.close()
