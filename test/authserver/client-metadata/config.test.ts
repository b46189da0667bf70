/** Issue 19: `authorization_server.client_metadata_documents` as `portcullis check` sees it: refusals and warnings. */
import { describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { loadConfig } from '../../../src/check/load.js'
import { configWarnings } from '../../../src/check/lint.js'
import { configProblems } from '../../support/config-problems.js'

const configWith = (documents: Record<string, unknown>) => stringify({
  upstreams: { echo: { url: 'builtin:echo' } },
  routes: [{ id: 'api', path: '/api/**', upstream: 'echo' }],
  authorization_server: { enabled: true, issuer: 'https://auth.example.com', store: { type: 'memory' }, client_metadata_documents: { enabled: true, ...documents } },
})

function problems(documents: Record<string, unknown>): string[] {
  return configProblems(configWith(documents))
}

describe('portcullis check: client_metadata_documents', () => {
  const at = 'authorization_server.client_metadata_documents'

  it('accepts every documented key', () => {
    expect(problems({ allowed_hosts: ['clients.example.org', '*.example.com'], scopes: ['mcp:tools'], max_size: '64kb', timeout: '5s',
      cache_ttl: { min: '1m', max: '1d' }, allow_private_addresses: false, redirect_uris: ['loopback', 'localhost', 'https', 'private_use'] })).toEqual([])
  })

  it('refuses an oversized max_size, a long timeout, inverted cache bounds, bad host patterns, unknown redirect URI forms and unknown keys', () => {
    expect(problems({ max_size: '65kb' })).toEqual([`${at}.max_size: must be between 256b and 64kb`])
    expect(problems({ timeout: '1m' })).toEqual([`${at}.timeout: must be between 100ms and 30s`])
    expect(problems({ cache_ttl: { min: '1h', max: '1m' } })).toEqual([`${at}.cache_ttl: min must not be greater than max`])
    expect(problems({ allowed_hosts: ['*', '*.com', 'a.*.example.com', 'https://x.example.com'] })).toHaveLength(4)
    expect(problems({ follow_redirects: true })).toHaveLength(1)
    expect(problems({ redirect_uris: ['http'] })).toHaveLength(1)
    expect(problems({ redirect_uris: [] })).toHaveLength(1)
  })

  it('warns about allow_private_addresses and about no scopes', () => {
    const warnings = configWarnings(loadConfig('portcullis.yaml', configWith({ allow_private_addresses: true }), {}))
    expect(warnings).toEqual(expect.arrayContaining([
      expect.stringMatching(/^authorization_server\.client_metadata_documents\.allow_private_addresses is true/),
      'authorization_server.client_metadata_documents.scopes is empty: clients known by a metadata document can be given no scope',
    ]))
    expect(configWarnings(loadConfig('portcullis.yaml', configWith({ scopes: ['a'] }), {}))
      .filter((warning) => warning.includes('client_metadata_documents'))).toEqual([])
  })
})
