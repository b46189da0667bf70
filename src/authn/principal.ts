/** Who a validated token speaks for: what scopes are checked against and identity headers are set from. */
export interface Principal {
  readonly issuer: string
  readonly subject: string | undefined
  readonly clientId: string | undefined
  readonly scopes: readonly string[]
  /** Seconds since the epoch. */
  readonly expiresAt: number | undefined
  readonly claims: Readonly<Record<string, unknown>>
}

/** `scope` (RFC 8693 §4.2, space-delimited) or `scp` (array, or a string as some issuers send it). */
export function readScopes(claims: Record<string, unknown>, claim: 'scope' | 'scp' | undefined): string[] | undefined {
  const names = claim ? [claim] : ['scope', 'scp']
  for (const name of names) {
    const value = claims[name]
    if (value === undefined) continue
    if (typeof value === 'string') return value.split(' ').filter((scope) => scope !== '')
    if (Array.isArray(value) && value.every((scope) => typeof scope === 'string')) return value as string[]
    return undefined  // present but malformed: the caller rejects the token
  }
  return []
}
