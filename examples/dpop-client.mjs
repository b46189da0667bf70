// A DPoP client against the default config (`npm start`), with oauth4webapi: a key pair, a DPoP-bound token
// for demo-service (client_credentials), then the echo API called with a fresh proof per request.
//   node examples/dpop-client.mjs [http://127.0.0.1:8080]
import * as oauth from 'oauth4webapi'

const base = process.argv[2] ?? 'http://127.0.0.1:8080'
const insecure = { [oauth.allowInsecureRequests]: true }  // the default config listens on plain http (loopback)

const issuer = new URL(base)
const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }))
const client = { client_id: 'demo-service' }
const clientAuth = oauth.ClientSecretBasic('demo-secret-change-me')
const DPoP = oauth.DPoP(client, await oauth.generateKeyPair('ES256'))

const grant = () => oauth.clientCredentialsGrantRequest(as, client, clientAuth, new URLSearchParams({ scope: 'echo:read' }), { DPoP, ...insecure })
let response = await grant()
let tokens
try {
  tokens = await oauth.processClientCredentialsResponse(as, client, response)
} catch (error) {
  if (!oauth.isDPoPNonceError(error)) throw error
  tokens = await oauth.processClientCredentialsResponse(as, client, await grant())  // the server asked for a nonce: once more with it
}
console.log(`token_type: ${tokens.token_type}`)

const api = new URL('/api/orders/42', base)
const call = () => oauth.protectedResourceRequest(tokens.access_token, 'GET', api, undefined, undefined, { DPoP, ...insecure })
response = await call().catch(async (error) => { if (oauth.isDPoPNonceError(error)) return call(); throw error })
const echoed = await response.json()
console.log(`GET /api/orders/42 with DPoP: ${response.status}, x-auth-subject: ${echoed.headers['x-auth-subject']}`)

const bearer = await fetch(api, { headers: { authorization: `Bearer ${tokens.access_token}` } })
console.log(`the same token as Bearer: ${bearer.status}, ${bearer.headers.get('www-authenticate')}`)
