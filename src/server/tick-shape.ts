/**
 * Keeps one of Node's own `process.nextTick` objects alive for the life of the process. Imported
 * for this side effect first of all by the CLI (src/cli.ts), before the rest of the program loads: the
 * loading itself runs a full garbage collection.
 *
 * nextTick (lib/internal/process/task_queues.js) builds each tick as
 * `{ [async_id_symbol]: id, [trigger_async_id_symbol]: trigger, callback, args }`. V8 compiles those
 * computed-key stores against the object shapes (maps) the site has seen, and holds them weakly. When a
 * full collection runs while no tick object is alive, those shapes die, the next tick makes new ones, the
 * site's feedback turns megamorphic, and from then on every tick defines its four properties in V8's
 * runtime: node:http, streams and undici make about ten ticks per proxied request. It happened in about
 * a third to a half of the gateway processes started by the bench (perf: 3.3 to 6.4 µs per request in
 * those runtime functions alone) and to a minimal node:http proxy once it had run a full collection.
 * One live tick object holds the chain of shapes (each map points to the one before it), so they never die.
 */
import { createHook } from 'node:async_hooks'

let kept: object | undefined

const noop = (): void => {}

/** Captures one tick object (an init hook sees it as its resource) and keeps it; once per process. Returns it. */
export function keepTickShape(): object | undefined {
  if (kept !== undefined) return kept
  const hook = createHook({
    init(_id, type, _trigger, resource) {
      if (type === 'TickObject' && kept === undefined) kept = resource
    },
  })
  hook.enable()
  try {
    process.nextTick(noop)
  } finally {
    hook.disable()
  }
  return kept
}

keepTickShape()
