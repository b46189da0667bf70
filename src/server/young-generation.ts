/**
 * The size of V8's young generation for a gateway process. Node 20's default semi-space (16 MB on 64-bit)
 * fills many times a second under load (about 25 times at 20,000 requests/s in the bench), and each scavenge copies
 * every request in flight; a proxy keeps many in flight. At 64 MB, scavenges are about 4 times rarer: measured side
 * by side (bench/corun.mjs) on node 20, a JWT cache hit costs about 4 % less CPU per request (1.043 and 1.04 for
 * the process without the flag, 8 and 6 rounds), for about 75 MB more RSS per process under load. The minimal proxy
 * of the bench gains nothing from it (its scavenges are cheaper), so it is Portcullis's setting, not a bench one.
 * On node 22 (the same 16 MB) and node 26 (its own young generation larger) the flag measured no gain: 1.000 over 8
 * rounds on each; node 24 (whose own grows further still) 1.006. So only node 20 gets it.
 *
 * V8 sizes its heap once, when the process starts (`v8.setFlagsFromString` later has no effect), so the flag is
 * given where the process is started: `npm start`, and the workers of `server.workers`, which the primary starts
 * itself. An operator's own `--max-semi-space-size` (on the command line or in NODE_OPTIONS) always stands.
 */
import { flagPattern, setsFlag } from './node-flags.js'

export const YOUNG_GENERATION_FLAG = '--max-semi-space-size=64'

const SEMI_SPACE = flagPattern('max-semi-space-size')

/** Whether the process's own arguments or NODE_OPTIONS set the semi-space size already. */
export function setsSemiSpace(execArgv: readonly string[], nodeOptions: string | undefined): boolean {
  return setsFlag(SEMI_SPACE, execArgv, nodeOptions)
}

/** Whether the flag pays on node `version` (`v20.20.2`): node 20 only, as measured (see above). */
export function youngGenerationPays(version: string): boolean {
  return /^v?20\./.test(version)
}

/** The node arguments that size a gateway's young generation: the flag, unless the operator set one or it does not pay on this node. */
export function youngGenerationArgs(execArgv: readonly string[], nodeOptions: string | undefined, version = process.version): string[] {
  return setsSemiSpace(execArgv, nodeOptions) || !youngGenerationPays(version) ? [] : [YOUNG_GENERATION_FLAG]
}

/** The node arguments of a worker: the primary's, then {@link youngGenerationArgs}. */
export function workerExecArgv(execArgv: readonly string[], nodeOptions: string | undefined, version = process.version): string[] {
  return [...execArgv, ...youngGenerationArgs(execArgv, nodeOptions, version)]
}
