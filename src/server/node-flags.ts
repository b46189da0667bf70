/** Whether an operator gave node a V8 flag already (young-generation.ts, inlining-budget.ts). */

/** A matcher for `--name` in any of node's spellings of it (`-` or `_` between words; `=value` or ` value`). */
export function flagPattern(name: string): RegExp {
  return new RegExp(`(?:^|\\s)--${name.split('-').join('[-_]')}(?:=|\\s|$)`)
}

/** Whether the process's own arguments or NODE_OPTIONS hold the flag `pattern` matches. */
export function setsFlag(pattern: RegExp, execArgv: readonly string[], nodeOptions: string | undefined): boolean {
  return execArgv.some((arg) => pattern.test(arg)) || (nodeOptions !== undefined && pattern.test(nodeOptions))
}
