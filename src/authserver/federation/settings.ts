/**
 * `identity_providers[]` with its preset and defaults applied, its secret read (from `${ENV}` in the YAML or
 * from `client_secret_file`) and its private key imported: what the connectors run on.
 */
import { readFileSync } from 'node:fs'
import { importJWK, importPKCS8, type CryptoKey, type JWK } from 'jose'
import { parseClaimPath, type ClaimPath } from '../../claims/path.js'
import type { IdentityProviderConfig } from '../../config/schema.js'
import { isLoopbackHost } from '../../config/loopback.js'
import { parseDuration } from '../../config/units.js'
import { GENERIC_OIDC, IDENTITY_PRESETS, type PresetDefaults } from './presets.js'

export type UpstreamClientAuth =
  | { readonly method: 'client_secret_basic'; readonly secret: string }
  | { readonly method: 'private_key_jwt'; readonly key: CryptoKey; readonly alg: string; readonly kid?: string }
  | { readonly method: 'none' }

export interface IdentityProviderSettings {
  readonly id: string
  /** The button's label: `name`, or the preset's. */
  readonly name: string
  readonly kind: 'oidc' | 'github'
  readonly preset?: string
  /** OpenID Connect: the issuer identifier discovery starts from (OIDC Discovery §4). */
  readonly issuer?: string
  readonly clientId: string
  readonly clientAuth: UpstreamClientAuth
  readonly scopes: readonly string[]
  /** Joined with `:` into the upstream subject. */
  readonly subject: readonly ClaimPath[]
  /** `provider`: our sub is `<id>:<upstream subject>` (the same sub at two providers is two people). */
  readonly subjectScope: 'provider' | 'global'
  /** Our claim name → where in the upstream claims it comes from. */
  readonly claims: ReadonlyArray<readonly [string, ClaimPath]>
  readonly allow: { readonly emailDomains?: readonly string[]; readonly groups?: readonly string[]; readonly tenants?: readonly string[] }
  readonly userinfo: boolean
  readonly logoutUpstream: boolean
  readonly refreshCheck: boolean
  readonly timeoutMs: number
  /** GitHub's pages and REST API (GitHub Enterprise Server elsewhere). */
  readonly github: { readonly webUrl: string; readonly apiUrl: string }
  /** Whether an upstream answer over http:// is acceptable (a loopback issuer, or `server.allow_insecure_http`). */
  readonly allowHttp: boolean
}

function defaultsOf(config: IdentityProviderConfig): PresetDefaults {
  return config.preset !== undefined ? IDENTITY_PRESETS[config.preset] : GENERIC_OIDC
}

/** The private key of `private_key_jwt` (RFC 7523 §2.2): a PKCS#8 PEM, or a JWK in JSON. */
async function importClientKey(file: string, alg: string): Promise<CryptoKey> {
  const text = readFileSync(file, 'utf8')
  if (text.trimStart().startsWith('{')) return await importJWK(JSON.parse(text) as JWK, alg) as CryptoKey
  return importPKCS8(text, alg)
}

async function clientAuthOf(config: IdentityProviderConfig): Promise<UpstreamClientAuth> {
  if (config.private_key_jwt) {
    const alg = config.private_key_jwt.alg ?? 'RS256'
    const key = await importClientKey(config.private_key_jwt.key_file, alg).catch((error: unknown) => {
      throw new Error(`identity_providers ${config.id}: private_key_jwt.key_file is not a PKCS#8 PEM or a private JWK for ${alg} ` +
        `(${error instanceof Error ? error.message : String(error)})`)
    })
    return {
      method: 'private_key_jwt', alg, key,
      ...(config.private_key_jwt.kid !== undefined && { kid: config.private_key_jwt.kid }),
    }
  }
  // A file's trailing newline is the editor's, not the secret's.
  const secret = config.client_secret ?? (config.client_secret_file !== undefined ? readFileSync(config.client_secret_file, 'utf8').replace(/\r?\n$/, '') : undefined)
  return secret !== undefined ? { method: 'client_secret_basic', secret } : { method: 'none' }
}

export async function resolveIdentityProvider(config: IdentityProviderConfig, allowInsecureHttp: boolean): Promise<IdentityProviderSettings> {
  const defaults = defaultsOf(config)
  const subjectPaths = config.subject?.claim === undefined ? defaults.subject
    : typeof config.subject.claim === 'string' ? [config.subject.claim] : config.subject.claim
  const claims = { ...defaults.claims, ...config.claims }
  const issuer = config.issuer ?? defaults.issuer
  const github = {
    webUrl: (config.github?.web_url ?? 'https://github.com').replace(/\/+$/, ''),
    apiUrl: (config.github?.api_url ?? 'https://api.github.com').replace(/\/+$/, ''),
  }
  const upstreamUrls = defaults.kind === 'github' ? [github.webUrl, github.apiUrl] : [issuer]
  return {
    id: config.id,
    name: config.name ?? defaults.name,
    kind: defaults.kind,
    ...(config.preset !== undefined && { preset: config.preset }),
    ...(issuer !== undefined && { issuer }),
    clientId: config.client_id,
    clientAuth: await clientAuthOf(config),
    scopes: config.scopes ?? [...defaults.scopes, ...(config.refresh_check && defaults.kind === 'oidc' ? ['offline_access'] : [])],
    subject: subjectPaths.map(parseClaimPath),
    subjectScope: config.subject?.scope ?? 'provider',
    claims: Object.entries(claims).map(([ours, path]) => [ours, parseClaimPath(path)] as const),
    allow: {
      ...(config.allow?.email_domains && { emailDomains: config.allow.email_domains.map((domain) => domain.toLowerCase()) }),
      ...(config.allow?.groups && { groups: config.allow.groups }),
      ...(config.allow?.tenants && { tenants: config.allow.tenants }),
    },
    userinfo: config.userinfo ?? false,
    logoutUpstream: config.logout?.upstream ?? false,
    refreshCheck: config.refresh_check ?? false,
    timeoutMs: parseDuration(config.timeout ?? '10s'),
    github,
    allowHttp: allowInsecureHttp || upstreamUrls.every((url) => url !== undefined && isLoopbackHost(new URL(url).hostname)),
  }
}
