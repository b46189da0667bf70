/**
 * Claim conditions, compiled once at load: `claims: { all: [...], any: [...] }` on a route (and on
 * an issuer, for every token it signs). Each condition names a claim by path and one test:
 *
 *   equals: V        the claim is V (string, number or boolean; no conversion: 42 is not "42")
 *   contains: V      the claim is an array with a member V, or a string of space-separated words, one of them V
 *                    (whole words only: "superadmin" does not contain "admin")
 *   one_of: [V, …]   the claim is one of these values
 *   present: true    the claim is there (and not null), whatever its value
 *
 * where V may also be `{ param: name }` (the route path's `{name}` segment, percent-decoded) or
 * `{ header: Name }` (the request header, one occurrence): a string, which a number claim matches by its
 * decimal form. A missing claim satisfies no condition.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { ClaimPathError, parseClaimPath, readClaim, type ClaimPath } from './path.js'
import type { Problem } from '../common/problem.js'
import { didYouMean } from '../config/suggest.js'

export type ClaimScalar = string | number | boolean
export type ClaimOperand = ClaimScalar | { param: string } | { header: string }

export interface ClaimConditionConfig {
  claim: string
  equals?: ClaimOperand
  contains?: ClaimOperand
  one_of?: ClaimScalar[]
  present?: true
}

export interface ClaimConditionsConfig {
  all?: ClaimConditionConfig[]
  any?: ClaimConditionConfig[]
}

/** Where a path parameter sits among the request path's segments. */
export interface ParamPosition {
  /** From the start, or (after a `**`) counted back from the end: segments[length - index]. */
  readonly index: number
  readonly fromEnd: boolean
}

/** What a condition may read of the request besides the token. */
export interface RequestFacts {
  readonly headers: IncomingHttpHeaders
  /** The request path's canonical segments (rules/segments.ts splitPath). */
  readonly segments: readonly string[]
}

type Test = (claims: Readonly<Record<string, unknown>> | undefined, request: RequestFacts | undefined) => boolean

export interface CompiledCondition {
  /** Where it is in the config, as the metrics and the log name it: `claims.all[1]`. */
  readonly label: string
  /** The condition as written, for the log: `realm_access.roles contains "orders-reader"` (never a token's value). */
  readonly text: string
  readonly path: ClaimPath
  readonly test: Test
}

export interface CompiledConditions {
  readonly all: readonly CompiledCondition[]
  readonly any: readonly CompiledCondition[] | null
}


/** A claim path from the config, or a problem at `at`; shared by conditions and claim headers. */
export function compilePath(text: string, at: Array<string | number>, problems: Problem[]): ClaimPath | undefined {
  try {
    return parseClaimPath(text)
  } catch (error) {
    if (!(error instanceof ClaimPathError)) throw error
    problems.push({ path: at, message: `claim path ${JSON.stringify(text)} ${error.message} (at character ${error.offset + 1})` })
    return undefined
  }
}

/** The value of a `{param}` segment, percent-decoded; undefined if it does not decode (then nothing equals it). */
export function paramValue(position: ParamPosition, segments: readonly string[]): string | undefined {
  const segment = segments[position.fromEnd ? segments.length - position.index : position.index]
  if (segment === undefined) return undefined
  if (!segment.includes('%')) return segment
  try {
    return decodeURIComponent(segment)
  } catch {
    return undefined
  }
}

function headerValue(name: string, headers: IncomingHttpHeaders): string | undefined {
  const value = headers[name]
  return typeof value === 'string' ? value : undefined
}

/** A scalar claim value against a request's string: numbers by their decimal form, nothing else converted. */
function sameAsText(claim: unknown, text: string): boolean {
  return typeof claim === 'string' ? claim === text : typeof claim === 'number' && String(claim) === text
}

function containsScalar(claim: unknown, value: ClaimScalar): boolean {
  if (Array.isArray(claim)) return claim.includes(value)
  return typeof claim === 'string' && typeof value === 'string' && claim.split(' ').includes(value)
}

function containsText(claim: unknown, text: string): boolean {
  if (Array.isArray(claim)) return claim.some((member) => sameAsText(member, text))
  return typeof claim === 'string' && claim.split(' ').includes(text)
}

const OPERATORS = ['equals', 'contains', 'one_of', 'present'] as const

function describe(value: ClaimOperand | ClaimScalar[] | true): string {
  if (Array.isArray(value)) return `[${value.map((item) => JSON.stringify(item)).join(', ')}]`
  if (typeof value !== 'object') return JSON.stringify(value)
  return 'param' in value ? `{${value.param}}` : `header ${value.header}`
}

/**
 * One condition, or undefined with its problems recorded. `params` are the route's path parameters; an
 * issuer's conditions have none and may not read the request (their verdict is cached with the token).
 */
function compileCondition(config: ClaimConditionConfig, at: Array<string | number>, label: string,
  params: ReadonlyMap<string, ParamPosition> | null, problems: Problem[]): CompiledCondition | undefined {
  const given = OPERATORS.filter((operator) => config[operator] !== undefined)
  if (given.length !== 1) {
    problems.push({ path: at, message: given.length === 0
      ? 'an empty condition: give one of equals, contains, one_of or present'
      : `give one of equals, contains, one_of or present, not ${given.join(' and ')}` })
    return undefined
  }
  const path = compilePath(config.claim, [...at, 'claim'], problems)
  const operator = given[0]!
  const operand = config[operator]!
  let test: Test | undefined
  if (operator === 'present') {
    test = (claims) => readClaim(claims, path!) !== undefined
  } else if (operator === 'one_of') {
    const values = operand as ClaimScalar[]
    test = (claims) => {
      const claim = readClaim(claims, path!)
      return claim !== undefined && !Array.isArray(claim) && values.includes(claim as ClaimScalar)
    }
  } else if (typeof operand !== 'object') {
    test = operator === 'equals'
      ? (claims) => readClaim(claims, path!) === operand
      : (claims) => containsScalar(readClaim(claims, path!), operand)
  } else {
    const ref = operand as { param: string } | { header: string }
    const compare = operator === 'equals' ? sameAsText : containsText
    if (params === null) {
      problems.push({ path: [...at, operator], message: "an issuer's conditions compare with values only: path parameters and headers belong to a route" })
    } else if ('param' in ref) {
      const position = params.get(ref.param)
      if (!position) {
        const known = [...params.keys()].map((name) => `{${name}}`).join(', ')
        problems.push({ path: [...at, operator, 'param'], message: `unknown path parameter "${ref.param}"${didYouMean(ref.param, params.keys())}: the route path has ${known || 'none'}` })
      } else {
        test = (claims, request) => {
          const text = request && paramValue(position, request.segments)
          return text !== undefined && compare(readClaim(claims, path!), text)
        }
      }
    } else {
      const name = ref.header.toLowerCase()
      test = (claims, request) => {
        const text = request && headerValue(name, request.headers)
        return text !== undefined && compare(readClaim(claims, path!), text)
      }
    }
  }
  if (!path || !test) return undefined
  const text = operator === 'present' ? `${path.text} present` : `${path.text} ${operator.replace('_', ' ')} ${describe(operand)}`
  return { label, text, path, test }
}

/**
 * `claims:` of a route (`at` = its config path) or an issuer (`params` null); undefined when absent.
 * `name` prefixes the labels (`claims.all[0]`; a preset's are `preset.claims.all[0]`).
 */
export function compileConditions(config: ClaimConditionsConfig | undefined, at: Array<string | number>,
  params: ReadonlyMap<string, ParamPosition> | null, problems: Problem[], name = 'claims'): CompiledConditions | undefined {
  if (config === undefined) return undefined
  if (!config.all?.length && !config.any?.length) {
    problems.push({ path: at, message: 'an empty condition: give claims.all or claims.any a condition, or remove claims' })
    return undefined
  }
  const list = (group: 'all' | 'any') => (config[group] ?? []).flatMap((condition, i) =>
    compileCondition(condition, [...at, group, i], `${name}.${group}[${i}]`, params, problems) ?? [])
  return { all: list('all'), any: config.any?.length ? list('any') : null }
}

/**
 * The label of the first condition the claims fail (`claims.any` when none of `any` holds), or undefined
 * when all hold. Runs on every request of a route with conditions: loops, no allocation when they hold.
 */
export function unmetCondition(conditions: CompiledConditions, claims: Readonly<Record<string, unknown>> | undefined,
  request: RequestFacts | undefined): CompiledCondition | 'any' | undefined {
  const all = conditions.all
  for (let i = 0; i < all.length; i++) if (!all[i]!.test(claims, request)) return all[i]
  const any = conditions.any
  if (any === null) return undefined
  for (let i = 0; i < any.length; i++) if (any[i]!.test(claims, request)) return undefined
  return 'any'
}

/** Every claim path the conditions read (to know which claims a principal keeps). */
export function conditionPaths(conditions: CompiledConditions | undefined): ClaimPath[] {
  return conditions ? [...conditions.all, ...(conditions.any ?? [])].map((condition) => condition.path) : []
}
