/**
 * What an issuer's tokens mean: where its permissions are (`scope_claim`), which claim names the
 * client (`client_id_claim`) and the audience (`audience_claim`), what every token of it must satisfy
 * (`claims`), and `preset`, which fills those in as a big identity provider issues its tokens. Compiled once
 * per issuer at load; read at verification (a cache hit reads none of it).
 */
import type { IssuerConfig, JwsAlgorithm } from '../config/schema.js'
import {compileConditions, compilePath, unmetCondition, type CompiledConditions} from './conditions.js'
import type { Problem } from '../common/problem.js'
import { SCOPE_TOKEN, readScopes } from '../common/principal.js'
import { readClaim, type ClaimPath } from './path.js'

import { PRESETS, type Preset } from '../config/constants.js'
export { PRESETS, type Preset }

type PresetDefaults = Pick<IssuerConfig, 'scope_claim' | 'client_id_claim' | 'audience_claim' | 'claims' | 'algorithms'>

/** docs/configuration.md, "Issuer presets", shows a token of each provider's documented shape. */
export const PRESET_DEFAULTS: Readonly<Record<Preset, PresetDefaults>> = {
  // Delegated tokens carry `scp` (a string), app-only ones `roles` (an array) and no `scp`; v1.0 names the
  // client `appid`. Every access token names its client, no ID token does (whose `aud` can be the API's id).
  entra: {
    scope_claim: ['scp', 'roles'], client_id_claim: ['azp', 'appid'], algorithms: ['RS256'],
    claims: { any: [{ claim: 'azp', present: true }, { claim: 'appid', present: true }] },
  },
  // Realm roles in realm_access.roles; a client's roles in resource_access.<client>.roles (add that path
  // yourself). Its access and ID tokens share the `typ` header: the payload's `typ` tells them apart.
  keycloak: {
    scope_claim: ['scope', 'realm_access.roles'], client_id_claim: ['azp', 'client_id'],
    claims: { all: [{ claim: 'typ', equals: 'Bearer' }] },
  },
  // RBAC with "Add Permissions in the Access Token": `permissions`, an array, beside `scope`.
  auth0: { scope_claim: ['scope', 'permissions'], client_id_claim: ['azp', 'client_id'], algorithms: ['RS256'] },
  // The custom authorization server's `scp` is an array; the client is `cid`.
  okta: { scope_claim: ['scp'], client_id_claim: ['cid'], algorithms: ['RS256'] },
  // Access tokens have no `aud`: the app client id is `client_id`; an ID token (token_use: id) is no access token.
  cognito: {
    scope_claim: ['scope', 'cognito:groups'], client_id_claim: ['client_id'], audience_claim: 'client_id', algorithms: ['RS256'],
    claims: { all: [{ claim: 'token_use', equals: 'access' }] },
  },
}

/**
 * An issuer's config with its preset's defaults filled in (what the config says itself wins), except
 * `claims`: the preset's conditions are kept apart (compiled as `preset.claims`, added to the issuer's own).
 */
export function withPreset(config: IssuerConfig): IssuerConfig {
  if (config.preset === undefined) return config
  const { claims: _presetClaims, ...defaults } = PRESET_DEFAULTS[config.preset]
  return { ...defaults, ...config } as IssuerConfig
}

/** One place permissions are read from. */
export type PermissionSource =
  | { readonly kind: 'scope' | 'scp' | 'scope_array' }
  | { readonly kind: 'claim'; readonly path: ClaimPath }

export interface IssuerClaims {
  /** Null: the default (the first of `scope` and `scp` present). */
  readonly permissions: readonly PermissionSource[] | null
  readonly clientId: readonly ClaimPath[]
  /** Null: `aud`. */
  readonly audience: ClaimPath | null
  /** The preset's conditions, then the issuer's own: every one must hold. */
  readonly conditions: readonly CompiledConditions[]
}

const KEYWORDS = new Set(['scope', 'scp', 'scope_array'])
const DEFAULT_CLIENT_ID: readonly ClaimPath[] = [{ text: 'client_id', segments: ['client_id'] }, { text: 'azp', segments: ['azp'] }]

function asList(value: string | string[] | undefined): string[] | undefined {
  return value === undefined ? undefined : Array.isArray(value) ? value : [value]
}

/** Compiles an issuer's claim settings (preset applied first); problems at `at` (`issuers[i]`). */
export function compileIssuerClaims(raw: IssuerConfig, at: Array<string | number>, problems: Problem[]): IssuerClaims {
  const config = withPreset(raw)
  const scopeClaims = asList(config.scope_claim)
  let permissions: PermissionSource[] | null = null
  if (scopeClaims) {
    permissions = []
    scopeClaims.forEach((entry, i) => {
      const where = Array.isArray(raw.scope_claim) ? [...at, 'scope_claim', i] : [...at, 'scope_claim']
      if (KEYWORDS.has(entry)) {
        permissions!.push({ kind: entry as 'scope' | 'scp' | 'scope_array' })
        return
      }
      const path = compilePath(entry, where, problems)
      if (path) permissions!.push({ kind: 'claim', path })
    })
    const kinds = permissions.map((source) => (source.kind === 'claim' ? source.path.text : source.kind))
    if (kinds.includes('scope') && kinds.includes('scope_array')) {
      problems.push({ path: [...at, 'scope_claim'], message: 'give scope or scope_array (the same claim, also as an array), not both' })
    }
  }
  const clientIdClaims = asList(config.client_id_claim)
  const clientId = clientIdClaims
    ? clientIdClaims.flatMap((entry, i) =>
      compilePath(entry, Array.isArray(raw.client_id_claim) ? [...at, 'client_id_claim', i] : [...at, 'client_id_claim'], problems) ?? [])
    : DEFAULT_CLIENT_ID
  const audience = config.audience_claim === undefined || config.audience_claim === 'aud'
    ? null
    : compilePath(config.audience_claim, [...at, 'audience_claim'], problems) ?? null
  const fromPreset = raw.preset && PRESET_DEFAULTS[raw.preset].claims
  const conditions = [
    ...(fromPreset ? [compileConditions(fromPreset, [...at, 'preset'], null, problems, 'preset.claims')!] : []),
    ...(raw.claims ? [compileConditions(raw.claims, [...at, 'claims'], null, problems)].filter((c) => c !== undefined) : []),
  ]
  return { permissions, clientId, audience, conditions }
}

/** For the runtime: the config passed `check`, so a problem here is a bug, not a user's mistake. */
export function issuerClaims(config: IssuerConfig): IssuerClaims {
  const problems: Problem[] = []
  const compiled = compileIssuerClaims(config, [], problems)
  if (problems.length > 0) throw new Error(`issuer ${config.issuer}: ${problems.map((problem) => problem.message).join('; ')}`)
  return compiled
}

export function effectiveAlgorithms(config: IssuerConfig): readonly JwsAlgorithm[] | undefined {
  return withPreset(config).algorithms
}

/**
 * The permissions of a token, in the order of `scope_claim`, each once; undefined when `scope` or `scp` is
 * malformed (the token is refused). `scope` is a space-delimited string (RFC 9068 §2.2.3), an array only with
 * `scope_array`; `scp` an array or a string. Any other claim: an array of strings, or a string of
 * space-separated words; a member that is not a scope-token (a space, a quote, non-ASCII, not a string) is
 * not a permission, and a claim of another type grants none (it never refuses the token).
 */
export function readPermissions(claims: Readonly<Record<string, unknown>>, sources: readonly PermissionSource[]): string[] | undefined {
  const found = new Set<string>()
  for (const source of sources) {
    if (source.kind !== 'claim') {
      const scopes = readScopes(claims, source.kind)
      if (!scopes) return undefined
      for (const scope of scopes) found.add(scope)
      continue
    }
    const value = readClaim(claims, source.path)
    const words = typeof value === 'string' ? value.split(' ') : Array.isArray(value) ? value : []
    for (const word of words) if (typeof word === 'string' && SCOPE_TOKEN.test(word)) found.add(word)
  }
  return [...found]
}

/** The first of the client id claims that is a string. */
export function readClientId(claims: Readonly<Record<string, unknown>>, paths: readonly ClaimPath[]): string | undefined {
  for (const path of paths) {
    const value = readClaim(claims, path)
    if (typeof value === 'string') return value
  }
  return undefined
}

/** The first of an issuer's conditions the claims fail, as its log text; undefined when all hold. */
export function unmetIssuerCondition(conditions: readonly CompiledConditions[], claims: Readonly<Record<string, unknown>>): string | undefined {
  for (const group of conditions) {
    const unmet = unmetCondition(group, claims, undefined)
    if (unmet === 'any') return `${group.any![0]!.label.replace(/\[0\]$/, '')}: none held`
    if (unmet) return `${unmet.label}: ${unmet.text}`
  }
  return undefined
}
