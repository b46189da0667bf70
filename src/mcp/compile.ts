/**
 * A route's `mcp:`, compiled once at load: rules by tool name, prompt name and JSON-RPC method,
 * each `{scopes, claims}` like the route's own. Names are compared exactly; a name that only folds to a
 * configured one (case, compatibility form, invisible characters: names.ts) gets that one's rule.
 */
import type { GatewayConfig, McpConfig, McpRuleConfig } from '../config/schema.js'
import { SCOPE_TOKEN } from '../common/principal.js'
import {compileConditions, conditionPaths, type CompiledConditions, type ParamPosition} from '../claims/conditions.js'
import type { Problem } from '../common/problem.js'
import type { ClaimPath } from '../claims/path.js'
import { didYouMean } from '../config/suggest.js'
import { parseSize } from '../config/units.js'
import { foldName, KNOWN_METHODS } from './names.js'

export interface McpRule {
  /** Where it is in the config, as the log and the metrics name it: `mcp.tools.delete_order`, `mcp.tools.*`. */
  readonly label: string
  readonly scopesAll: readonly string[]
  readonly scopesAny: readonly string[] | null
  readonly claims: CompiledConditions | null
}

/** The rules of `tools:` or `prompts:`. */
export interface NamedRules {
  readonly exact: ReadonlyMap<string, McpRule>
  /** By {@link foldName}: what a look-alike of a configured name gets. */
  readonly folded: ReadonlyMap<string, McpRule>
  /** `"*"`: names not configured; null when absent (they get the route's rules, and the method's). */
  readonly fallback: McpRule | null
}

export interface CompiledMcp {
  readonly methods: ReadonlyMap<string, McpRule>
  /** Keyed by the method that names them: `tools/call`, `prompts/get`. */
  readonly named: ReadonlyMap<string, NamedRules>
}

/** MCP 2026-07-28 "Tool Names": 1 to 128 characters; none of them invisible. */
const MAX_NAME = 128
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Z}\s]/u

function nameProblem(name: string): string | undefined {
  if (name === '') return 'an empty name'
  if (name.length > MAX_NAME) return `longer than ${MAX_NAME} characters`
  if (name.includes('*')) return 'a pattern: "*" alone is the rule for names not listed; no other wildcard is supported'
  if (INVISIBLE.test(name)) return 'has whitespace, a control or an invisible formatting character'
  return undefined
}

function compileRule(config: McpRuleConfig, at: Array<string | number>, label: string,
  params: ReadonlyMap<string, ParamPosition>, problems: Problem[]): McpRule {
  const all = config.scopes?.all ?? []
  const any = config.scopes?.any ?? null
  for (const [group, list] of [['all', all], ['any', any ?? []]] as const) {
    list.forEach((scope, i) => {
      if (!SCOPE_TOKEN.test(scope)) problems.push({ path: [...at, 'scopes', group, i], message: 'must be a scope-token (RFC 6749 §3.3: printable ASCII, no space, " or \\)' })
    })
  }
  if (all.length === 0 && any === null && config.claims === undefined) {
    problems.push({ path: at, message: 'an empty rule: give it scopes or claims' })
  }
  const claims = compileConditions(config.claims, [...at, 'claims'], params, problems, `${label}.claims`) ?? null
  return { label, scopesAll: all, scopesAny: any, claims }
}

function compileNamed(config: Record<string, McpRuleConfig>, at: Array<string | number>, kind: 'tools' | 'prompts',
  params: ReadonlyMap<string, ParamPosition>, problems: Problem[]): NamedRules {
  const exact = new Map<string, McpRule>()
  const folded = new Map<string, McpRule>()
  const firstByFold = new Map<string, string>()
  let fallback: McpRule | null = null
  for (const [name, rule] of Object.entries(config)) {
    const compiled = compileRule(rule, [...at, name], `mcp.${kind}.${name}`, params, problems)
    if (name === '*') { fallback = compiled; continue }
    const problem = nameProblem(name)
    if (problem !== undefined) { problems.push({ path: [...at, name], message: `${kind.slice(0, -1)} name ${JSON.stringify(name)}: ${problem}`, atKey: true }); continue }
    const fold = foldName(name)
    const other = firstByFold.get(fold)
    if (other !== undefined) {
      problems.push({ path: [...at, name], atKey: true,
        message: `${JSON.stringify(name)} differs from ${JSON.stringify(other)} only in case, compatibility form or invisible characters: an upstream that matched names loosely could take one for the other` })
      continue
    }
    firstByFold.set(fold, name)
    exact.set(name, compiled)
    folded.set(fold, compiled)
  }
  return { exact, folded, fallback }
}

/**
 * `mcp:` of a route (`at` = its config path), or null when absent (with its problems recorded). `params`
 * are the route's path parameters, which its rules' conditions may read, as the route's own may.
 */
export function compileMcp(config: McpConfig | undefined, at: Array<string | number>, auth: string,
  params: ReadonlyMap<string, ParamPosition>, problems: Problem[]): CompiledMcp | null {
  if (config === undefined) return null
  if (auth === 'none') problems.push({ path: at, message: 'mcp needs auth: required or optional' })
  const groups = [config.tools, config.prompts, config.methods]
  if (groups.every((group) => group === undefined || Object.keys(group).length === 0)) {
    problems.push({ path: at, message: 'an empty mcp: give tools, prompts or methods a rule, or remove mcp' })
  }
  const methods = new Map<string, McpRule>()
  for (const [method, rule] of Object.entries(config.methods ?? {})) {
    const ruleAt = [...at, 'methods', method]
    if (!KNOWN_METHODS.has(method)) {
      problems.push({ path: ruleAt, atKey: true,
        message: `unknown MCP method ${JSON.stringify(method)}${didYouMean(method, KNOWN_METHODS)} (client methods of MCP 2025-03-26 to 2026-07-28: ${[...KNOWN_METHODS].join(', ')})` })
      continue
    }
    methods.set(method, compileRule(rule, ruleAt, `mcp.methods.${method}`, params, problems))
  }
  const named = new Map<string, NamedRules>()
  if (config.tools) named.set('tools/call', compileNamed(config.tools, [...at, 'tools'], 'tools', params, problems))
  if (config.prompts) named.set('prompts/get', compileNamed(config.prompts, [...at, 'prompts'], 'prompts', params, problems))
  return { methods, named }
}

function rulesOf(mcp: CompiledMcp): McpRule[] {
  const rules = [...mcp.methods.values()]
  for (const group of mcp.named.values()) rules.push(...group.exact.values(), ...(group.fallback ? [group.fallback] : []))
  return rules
}

/** Every claim path the rules' conditions read (to know which claims a principal keeps). */
export function mcpClaimPaths(mcp: CompiledMcp | null): ClaimPath[] {
  return mcp === null ? [] : rulesOf(mcp).flatMap((rule) => conditionPaths(rule.claims ?? undefined))
}

/**
 * What the schema and the routes cannot say: MCP messages are read whole, up to `server.body_buffer_size`,
 * so a route with `mcp` needs that buffer.
 */
export function lintMcp(config: GatewayConfig): Problem[] {
  if (parseSize(config.server?.body_buffer_size ?? '64kb') > 0) return []
  return config.routes.flatMap((route, index) => route.mcp === undefined ? [] : [{ path: ['routes', index, 'mcp'],
    message: 'mcp reads each message whole, up to server.body_buffer_size, which is 0: set it (64kb by default)' }])
}
