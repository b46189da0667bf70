import { describe, expect, it } from 'vitest'
import { hashSecret } from '../crypto/secret-hash.js'
import { ClientRegistry } from './clients.js'

describe('ClientRegistry secrets', () => {
  it('verifies a hashed secret (constant-time compare), keeps verifying it, and still refuses a wrong one after a success', async () => {
    const registry = new ClientRegistry([{
      client_id: 'svc', client_secret_hash: await hashSecret('right-secret-0123456789'), grant_types: ['client_credentials'], scopes: [],
    }])
    const client = registry.find('svc')!
    expect(await client.verifySecret('right-secret-0123456789')).toBe(true)
    expect(await client.verifySecret('right-secret-0123456789')).toBe(true)
    expect(await client.verifySecret('wrong-secret-0123456789')).toBe(false)
    expect(await client.verifySecret('right-secret-012345678')).toBe(false)
    expect(await client.verifySecret('')).toBe(false)
  })

  it('verifies a plain (${ENV}) secret in constant time and never accepts a public client\'s empty secret', async () => {
    const registry = new ClientRegistry([
      { client_id: 'svc', client_secret: 'plain-secret-0123456789', grant_types: ['client_credentials'], scopes: [] },
      { client_id: 'spa', token_endpoint_auth_method: 'none', grant_types: ['refresh_token'], scopes: [] },
    ])
    expect(await registry.find('svc')!.verifySecret('plain-secret-0123456789')).toBe(true)
    expect(await registry.find('svc')!.verifySecret('plain-secret-012345678')).toBe(false)
    expect(await registry.find('spa')!.verifySecret('')).toBe(false)
    expect(registry.find('spa')!.confidential).toBe(false)
  })
})
