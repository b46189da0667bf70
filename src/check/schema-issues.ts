/** A schema error (Ajv's) as `portcullis check` words it: the config key, and what is wrong with it in plain words. */
import type { ErrorObject } from 'ajv'
import { didYouMean } from '../config/suggest.js'
import { instancePathOf, type Path } from './prune.js'

const customMessage = (error: ErrorObject) => (error.parentSchema as { 'x-message'?: string } | undefined)?.['x-message']

/**
 * A value that matches none of a union's forms makes Ajv report why each form failed (`must be string`,
 * `must be array`, …, `must match a schema in anyOf`): where the union has its own message, that one alone.
 */
export function withoutUnionNoise(errors: ErrorObject[]): ErrorObject[] {
  const unions = errors.filter((error) => error.keyword === 'anyOf' && customMessage(error) !== undefined).map((error) => error.instancePath)
  if (unions.length === 0) return errors
  return errors.filter((error) => (error.keyword === 'anyOf' && customMessage(error) !== undefined) ||
    !unions.some((at) => error.instancePath === at || error.instancePath.startsWith(`${at}/`)))
}

export function schemaIssue<Issue>(error: ErrorObject, issue: (p: Path, m: string, atKey?: boolean) => Issue): Issue {
  const configPath = instancePathOf(error)
  const custom = customMessage(error)
  switch (error.keyword) {
    case 'additionalProperties': {
      const key = (error.params as { additionalProperty: string }).additionalProperty
      const hint = custom && configPath.length === 1 && configPath[0] === 'upstreams' ? ` (${custom})` : ''
      const known = Object.keys((error.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties ?? {})
      return issue([...configPath, key], `unknown key${hint || didYouMean(key, known)}`, true)
    }
    case 'required':
      // Located at the parent (the key is not there), but named in full.
      return issue([...configPath, (error.params as { missingProperty: string }).missingProperty], 'is required')
    case 'enum': {
      const allowed = (error.params as { allowedValues: unknown[] }).allowedValues.map(String)
      const given = (error as { data?: unknown }).data
      return issue(configPath, `${custom ?? `must be one of ${allowed.join(', ')}`}${typeof given === 'string' ? didYouMean(given, allowed) : ''}`)
    }
    case 'pattern':
      return issue(configPath, custom ?? `must match ${(error.params as { pattern: string }).pattern}`)
    case 'anyOf':
    case 'const':
      return issue(configPath, custom ?? error.message ?? 'is invalid')
    default:
      return issue(configPath, error.message ?? 'is invalid')
  }
}
