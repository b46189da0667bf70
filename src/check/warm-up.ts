/**
 * The configs a loader thread started ahead warms its code up on (load-worker.ts): every kind of route, in several
 * shapes. V8 optimizes a function for the object shapes it has seen, and throws the optimized code away when another
 * comes; a file whose sections or route keys come in an order the warm-up never had would have the load compile its
 * parse, lint and route compile again, on other threads at the process's own priority (measured: 135 ms of compiling
 * in the first load of 10,000 routes after one warm-up config, docs/performance.md, routes). Past four shapes, a site
 * stops expecting any one (V8 makes it megamorphic), so each variant here orders them differently; scalars of every
 * core type (string, integer, boolean) go through the parser's resolution.
 */
import { stringify } from 'yaml'

const SERVICES = 25
/** More than four: see the module's comment. */
export const WARM_UP_VARIANTS = 5

/** `items` turned `turn` places to the left. */
function rotated<T>(items: readonly T[], turn: number): T[] {
  const at = turn % items.length
  return [...items.slice(at), ...items.slice(0, at)]
}

function routesOf(variant: number): object[] {
  const routes: object[] = []
  for (let i = 0; i < SERVICES; i++) {
    const kinds: Array<Array<[string, unknown]>> = [
      [['id', `list-${i}`], ['path', `/svc-${i}/v1/items`], ['upstream', 'echo'], ['methods', ['GET', 'POST']], ['scopes', { all: ['items:read'] }]],
      [['id', `item-${i}`], ['path', `/svc-${i}/v1/items/{id}`], ['upstream', 'echo'], ['auth', 'required'], ['methods', ['GET', 'PUT', 'DELETE']],
        ['scopes', { any: ['a', 'b'] }]],
      [['id', `search-${i}`], ['path', `/svc-${i}/v1/*/search`], ['upstream', 'echo'], ['auth', 'none'], ['methods', ['GET']],
        ['rate_limit_headers', false]],
      [['id', `rest-${i}`], ['path', `/svc-${i}/**`], ['upstream', 'echo'], ['max_body_size', '1mb']],
    ]
    for (const [kind, entries] of kinds.entries()) routes.push(Object.fromEntries(rotated(entries, variant + kind + i)))
  }
  return routes
}

/** The warm-up's configs, {@link WARM_UP_VARIANTS} of them, each with its sections and route keys in another order. */
export function warmUpConfigTexts(): string[] {
  return Array.from({ length: WARM_UP_VARIANTS }, (_, variant) => {
    const sections: Array<[string, unknown]> = [
      ['server', { listen: '127.0.0.1:8080', keep_alive_timeout: '75s', admission: { max_in_flight: 10_000 } }],
      ['log', { level: 'info' }],
      ['upstreams', { echo: { url: 'builtin:echo' } }],
      ['issuers', [{ issuer: 'https://idp.example/', jwks_uri: 'https://idp.example/jwks', audience: ['api'] }]],
      ['routes', routesOf(variant)],
    ]
    return stringify(Object.fromEntries(rotated(sections, variant)))
  })
}
