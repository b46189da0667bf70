/** docs/identity-providers.md: its complete examples (the YAML blocks that are whole files) pass `portcullis check`. */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../../src/check/load.js'

const doc = readFileSync(new URL('../../docs/identity-providers.md', import.meta.url), 'utf8')
const examples = [...doc.matchAll(/```yaml\n(# portcullis\.yaml[^\n]*\n[\s\S]*?)```/g)].map((match) => match[1]!)
const env = { PORTCULLIS_KEK: Buffer.alloc(32, 9).toString('base64'), ENTRA_CLIENT_SECRET: 'entra-secret', KEYCLOAK_CLIENT_SECRET: 'keycloak-secret' }

describe('docs/identity-providers.md', () => {
  it('has the Entra ID and the Keycloak example', () => {
    expect(examples.map((text) => text.split('\n')[0])).toEqual([
      '# portcullis.yaml: Entra ID sign-in for an MCP server behind the gateway',
      '# portcullis.yaml: Keycloak sign-in, realm roles and groups to the gateway',
    ])
  })
  for (const text of examples) {
    it(`passes check: ${text.split('\n')[0]!.slice(18)}`, () => {
      let problems: string[] = []
      try {
        loadConfig('portcullis.yaml', text, env)
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error
        problems = error.issues.map((issue) => `${issue.path}: ${issue.message}`)
      }
      expect(problems).toEqual([])
    })
  }
})
