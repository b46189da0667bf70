// CPU time of a process, for the bench scripts that report CPU per request (run.mjs, corun.mjs, decision-wrk.mjs,
// auto-instrumentation.mjs).
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100

/** utime + stime of process `pid` (all its threads), in µs, from /proc/<pid>/stat. */
export function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 1e6 / CLK_TCK
}
