/**
 * The body of the worker thread that loads a config off the event loop (load-off-thread.ts): it reads the file and
 * takes its digest, then parse, schema and every lint, as `loadConfig`; the result goes back as a plain value, or
 * the ConfigError's issues. A file of the digest in service is not loaded, and the thread waits for the next job.
 * The routes go back apart, {@link ROUTES_PER_MESSAGE} a message on their own port, so that the event loop takes
 * them in pieces: 10,000 routes in one message take tens of milliseconds to copy in.
 */
import { setPriority } from 'node:os'
import { parentPort, workerData, type TransferListItem } from 'node:worker_threads'
import { ConfigError, loadConfig } from './load.js'
import { placesIn, reloadFile, UnreadableConfig, type Answer, type LoadJob, type RoutesPiece } from './load-off-thread.js'
import { collectAll } from '../common/young-collection.js'
import { warmUpConfigTexts } from './warm-up.js'

/** Each is one event-loop turn's taking in (a few milliseconds beside a busy core; see common/slices.ts). */
const ROUTES_PER_MESSAGE = 200

// A lower scheduling priority for this thread alone (on Linux a nice value is per thread; pid 0 is the caller):
// where the gateway has no core to spare, the event loop gets about nine tenths of it while the parse runs, not
// half. Not the lowest (19): a saturated gateway must still finish a reload, its parse getting a tenth of a core
// rather than a seventieth (CFS weights 110 and 15 against 1024).
try { setPriority(10) } catch { /* not permitted here: the load runs at the process's priority */ }

const answer = (value: Answer, transfer: TransferListItem[] = []) => parentPort!.postMessage(value, transfer)

/** One load, then the thread is ended by its owner: the memory the parse took goes with it (a file unchanged: no load). */
function load({ fileName, env, served, servedKeys, routesPort }: LoadJob): void {
  try {
    const reloaded = reloadFile(fileName, env, served)
    const { digest } = reloaded
    if (reloaded.config === undefined) {
      routesPort.close()
      answer({ ok: true, digest, unchanged: true })
      return
    }
    const { config, keys } = reloaded
    const { routes, ...rest } = config
    // A route equal to one in service goes as that one's place: the event loop takes the object it has.
    const places = placesIn(keys, servedKeys)
    let pieces = 0
    for (let at = 0; at < routes.length; at += ROUTES_PER_MESSAGE, pieces++) {
      const piece: RoutesPiece = []
      for (let i = at; i < Math.min(at + ROUTES_PER_MESSAGE, routes.length); i++) piece.push(places[i]! >= 0 ? places[i]! : routes[i]!)
      routesPort.postMessage(piece)
    }
    answer({ ok: true, digest, config: { ...rest, routes: [] }, pieces, keys }, [keys.buffer as ArrayBuffer])
  } catch (error) {
    if (error instanceof UnreadableConfig) answer({ ok: false, unreadable: error.message })
    else if (error instanceof ConfigError) answer({ ok: false, fileName: error.fileName, issues: error.issues })
    else answer({ ok: false, message: error instanceof Error ? error.message : String(error) })
  }
}

/** Rounds over the warm-up's configs: enough calls of what runs once a load for V8 to optimize it (warm-up.ts). */
const WARM_UP_ROUNDS = 4

/**
 * A thread started ahead of its load loads small configs of every kind of route in several shapes, and drops them, so
 * that its parse, schema check and route compile run as optimized code when the file comes (warm-up.ts).
 */
function warmUp(): void {
  const texts = warmUpConfigTexts()
  for (let round = 0; round < WARM_UP_ROUNDS; round++) for (const text of texts) loadConfig('warm-up.yaml', text, {})
  // What the warm-up allocated is garbage now: collected while the thread waits, not during the load to come.
  collectAll()
}

// The job comes as a message: the thread may be started ahead of it (load-off-thread.ts), its modules loaded. A
// thread whose file was unchanged gets the next job too.
parentPort!.on('message', load)
if ((workerData as { warmUp?: boolean } | undefined)?.warmUp === true) warmUp()
