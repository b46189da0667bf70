/**
 * The size of V8's young generation for a gateway process (issue 24). Node 20's default semi-space (16 MB on 64-bit;
 * node 26's is 32 MB) fills many times a second under load (about 25 times at 20,000 requests/s in the bench), and
 * each scavenge copies every request in flight; a proxy keeps many in flight. At 64 MB, scavenges are about 4 times
 * rarer than at 16: measured side by side (bench/corun.mjs) on node 20, a JWT cache hit costs about 4 % less CPU per
 * request, for about 75 MB more RSS per process under load (from 32 MB, about half of both). The minimal proxy of
 * the bench gains nothing from it (its scavenges are cheaper), so it is Portcullis's setting, not a bench one.
 *
 * V8 sizes its heap once, when the process starts (`v8.setFlagsFromString` later has no effect), so the flag is
 * given where the process is started: the container image (`NODE_OPTIONS`), `npm start`, and the workers of
 * `server.workers`, which the primary starts itself. An operator's own `--max-semi-space-size` (on the command
 * line or in NODE_OPTIONS) always stands.
 */
export const YOUNG_GENERATION_FLAG = '--max-semi-space-size=64'

const SEMI_SPACE = /(?:^|\s)--max[-_]semi[-_]space[-_]size(?:=|\s|$)/

/** Whether the process's own arguments or NODE_OPTIONS set the semi-space size already. */
export function setsSemiSpace(execArgv: readonly string[], nodeOptions: string | undefined): boolean {
  return execArgv.some((arg) => SEMI_SPACE.test(arg)) || (nodeOptions !== undefined && SEMI_SPACE.test(nodeOptions))
}

/** The node arguments of a worker: the primary's, with the young generation's size unless the operator set one. */
export function workerExecArgv(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  return setsSemiSpace(execArgv, nodeOptions) ? [...execArgv] : [...execArgv, YOUNG_GENERATION_FLAG]
}
