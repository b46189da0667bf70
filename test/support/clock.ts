/** A clock a test moves by hand, starting on a whole second so that `exp` falls exactly where a test puts it. */
export function testClock() {
  let now = Math.floor(Date.now() / 1000) * 1000
  return {
    now: () => now,
    advance(ms: number) { now += ms },
    seconds: () => Math.floor(now / 1000),
  }
}
export type Clock = ReturnType<typeof testClock>
