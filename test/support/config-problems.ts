/** What `portcullis check` says of a config text: `dotted.key: message` per problem; [] when it loads. */
import { ConfigError, loadConfig } from '../../src/check/load.js'

export function configProblems(text: string): string[] {
  try {
    loadConfig('portcullis.yaml', text, {})
  } catch (error) {
    if (error instanceof ConfigError) return error.issues.map((issue) => `${issue.path}: ${issue.message}`)
    throw error
  }
  return []
}
