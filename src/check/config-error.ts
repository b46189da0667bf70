/** A config file's problems, each with `file:line:col` and the dotted key: what `portcullis check` prints. */
export type ConfigPath = ReadonlyArray<string | number>

export interface ConfigIssue {
  line: number
  col: number
  path: string
  message: string
}

/** Every problem found in one config file; `toString()` is what `portcullis check` prints. */
export class ConfigError extends Error {
  constructor(readonly fileName: string, readonly issues: ConfigIssue[]) {
    super(issues.map((issue) => formatIssue(fileName, issue)).join('\n'))
    this.name = 'ConfigError'
  }
}

export function formatIssue(fileName: string, issue: ConfigIssue): string {
  const key = issue.path === '' ? '' : `${issue.path}: `
  return `${fileName}:${issue.line}:${issue.col}  ${key}${issue.message}`
}

/** `['routes', 2, 'scopes']` → `routes[2].scopes` */
export function formatPath(configPath: ConfigPath): string {
  let out = ''
  for (const part of configPath) out += typeof part === 'number' ? `[${part}]` : out === '' ? part : `.${part}`
  return out
}

/** File order, so `portcullis check` reads top to bottom. */
export function sortIssues(issues: ConfigIssue[]): ConfigIssue[] {
  return issues.sort((a, b) => a.line - b.line || a.col - b.col)
}
