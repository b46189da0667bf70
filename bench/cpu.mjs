// CPU time of a process, for the bench scripts that report CPU per request (run.mjs, corun.mjs, decision-wrk.mjs,
// auto-instrumentation.mjs).
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100

/** utime + stime of process `pid` (all its threads), in µs, from /proc/<pid>/stat. */
export function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 1e6 / CLK_TCK
}

/**
 * The time every thread of process `pid` has spent on a CPU, in µs, to the nanosecond (the first field of each
 * /proc/<pid>/task/<tid>/schedstat): for runs of a fraction of a second, where utime+stime's 10 ms ticks are too
 * coarse. Threads that have exited are not counted (V8's and libuv's live as long as the process).
 */
export function cpuMicrosPrecise(pid) {
  let nanos = 0
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      nanos += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0])
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return nanos / 1000
}
