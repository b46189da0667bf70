/**
 * The admin listener (`admin.listen`, never the public one): `/metrics` for Prometheus, `/healthz` (the
 * process answers) and `/readyz` (it can serve: config loaded, store reachable, every issuer's keys
 * fetched once; 503 with the reasons otherwise). Its own small fastify instance, so nothing here is
 * reachable from the public port, and a slow scrape never shares a queue with traffic.
 */
import Fastify, { type FastifyInstance } from 'fastify'
import type { GatewayConfig } from '../config/schema.js'

/** How long a readiness check may wait on the store before it counts as unreachable. */
const STORE_PING_TIMEOUT_MS = 2000

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`${what} timed out`)), ms) })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** Why the gateway cannot serve yet (empty when it can). */
export async function readinessProblems(gateway: FastifyInstance, config: () => GatewayConfig): Promise<string[]> {
  const problems: string[] = []
  const store = gateway.authServer?.ctx.store
  if (store) {
    try {
      await withTimeout(store.ping(), STORE_PING_TIMEOUT_MS, 'store ping')
    } catch (error) {
      problems.push(`store unreachable: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  // Issuers with a key set (jwks_uri, jwks_file, discovery): each must have been fetched once.
  const sets = new Map(gateway.gateway.keySetStats().map((set) => [set.issuer, set]))
  for (const issuer of config().issuers ?? []) {
    const set = sets.get(issuer.issuer)
    if (set && set.ageMs === undefined) problems.push(`keys of issuer ${issuer.issuer} not fetched yet`)
  }
  return problems
}

/** What the admin listener serves: the metrics' text, and why the process (or its workers) cannot serve. */
export interface AdminSources {
  metrics(): Promise<string>
  readonly contentType: string
  readiness(): Promise<string[]>
}

/** The admin listener's routes, for one process (below) and for the primary of several workers (cluster.ts). */
export async function adminServer(sources: AdminSources): Promise<FastifyInstance> {
  const admin = Fastify({ logger: false })
  admin.get('/metrics', async (_request, reply) => {
    const body = await sources.metrics()
    return reply.header('content-type', sources.contentType).header('cache-control', 'no-store').send(body)
  })
  admin.get('/healthz', async (_request, reply) => reply.header('cache-control', 'no-store').send({ status: 'ok' }))
  admin.get('/readyz', async (_request, reply) => {
    const problems = await sources.readiness()
    reply.header('cache-control', 'no-store')
    if (problems.length > 0) return reply.code(503).send({ status: 'unavailable', reasons: problems })
    return reply.send({ status: 'ready' })
  })
  await admin.ready()
  return admin
}

export function buildAdmin(gateway: FastifyInstance, config: () => GatewayConfig): Promise<FastifyInstance> {
  const { registry } = gateway.metrics
  return adminServer({
    metrics: () => registry.metrics(),
    contentType: registry.contentType,
    readiness: () => readinessProblems(gateway, config),
  })
}
