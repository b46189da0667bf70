import { describe, expect, it } from 'vitest'
import type { GatewayConfig } from '../config/schema.js'
import { compileResources, metadataPathOf } from './metadata.js'

describe('RFC 9728 resources', () => {
  it('forms the metadata path by §3.1: the well-known prefix, then the identifier path', () => {
    expect(metadataPathOf(new URL('https://api.example.com'))).toBe('/.well-known/oauth-protected-resource')
    expect(metadataPathOf(new URL('https://api.example.com/orders/v2'))).toBe('/.well-known/oauth-protected-resource/orders/v2')
  })

  it('names the embedded server and the issuers with discovery, not an issuer known only by its keys', () => {
    const config = {
      server: { public_url: 'https://api.example.com' },
      upstreams: { main: { url: 'http://127.0.0.1:9001' } },
      issuers: [
        { issuer: 'https://idp.example.com/', discovery: true, audience: ['a'] },
        { issuer: 'https://static.example.com/', jwks_uri: 'https://static.example.com/jwks', audience: ['a'] },
      ],
      routes: [{ id: 'r', path: '/**', upstream: 'main', scopes: { all: ['x'], any: ['y', 'x'] } }],
      authorization_server: { enabled: true, issuer: 'https://api.example.com' },
      resources: [{ resource: 'https://api.example.com', routes: ['r'] }],
    } as GatewayConfig
    const resource = compileResources(config).byRoute.get('r')!
    expect(JSON.parse(resource.document)).toEqual({
      resource: 'https://api.example.com',
      authorization_servers: ['https://api.example.com', 'https://idp.example.com/'],
      scopes_supported: ['x', 'y'],
      bearer_methods_supported: ['header'],
      // RFC 9449: the gateway takes DPoP proofs on the route (dpop: allowed by default).
      dpop_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256', 'EdDSA', 'Ed25519'],
    })
    expect(resource.metadataUrl).toBe('https://api.example.com/.well-known/oauth-protected-resource')
    expect(resource.audiences).toEqual(['https://api.example.com'])
  })
})
