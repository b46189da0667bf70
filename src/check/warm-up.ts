/** The config a loader thread started ahead warms its code up on (load-worker.ts): every kind of route, 400 of them. */
import { stringify } from 'yaml'

const SERVICES = 100

export function warmUpConfigText(): string {
  const routes = []
  for (let i = 0; i < SERVICES; i++) {
    routes.push(
      { id: `list-${i}`, path: `/svc-${i}/v1/items`, upstream: 'echo', methods: ['GET', 'POST'], scopes: { all: ['items:read'] } },
      { id: `item-${i}`, path: `/svc-${i}/v1/items/{id}`, upstream: 'echo', methods: ['GET', 'PUT', 'DELETE'], scopes: { any: ['a', 'b'] } },
      { id: `search-${i}`, path: `/svc-${i}/v1/*/search`, upstream: 'echo', auth: 'none', methods: ['GET'] },
      { id: `rest-${i}`, path: `/svc-${i}/**`, upstream: 'echo' },
    )
  }
  const issuers = [{ issuer: 'https://idp.example/', jwks_uri: 'https://idp.example/jwks', audience: ['api'] }]
  return stringify({ upstreams: { echo: { url: 'builtin:echo' } }, issuers, routes })
}
