/**
 * One worker under `server.workers`: runPortcullis without the admin listener (the primary's), its
 * metrics offered to the primary's aggregated scrape (process metrics labelled with the worker's id), its
 * revocations sent to the other workers and its brute-force counters, DPoP proof marks and rate-limit buckets
 * kept by the primary.
 */
import cluster from 'node:cluster'
import { AggregatorRegistry } from 'prom-client'
import { clusterLimiter } from '../authserver/throttle.js'
import { Metrics } from '../metrics/metrics.js'
import { readinessProblems } from './admin.js'
import { useSharedNonceKey } from '../dpop/nonce.js'
import { askNonceKey, ipcBroadcast, ipcFirstUse, isClusterMessage, toPrimary } from './cluster-messages.js'
import { ipcRates } from './cluster-rates.js'
import { runPortcullis, type RunningPortcullis } from './run.js'

export async function runWorker(file: string): Promise<RunningPortcullis> {
  // Before the config is read: the nonce issuer takes the key when it is made.
  const nonceKey = await askNonceKey()
  if (nonceKey !== undefined) useSharedNonceKey(nonceKey)
  const metrics = new Metrics({ worker: cluster.worker!.id })
  const running = await runPortcullis(file, { worker: true, metrics, workers: { broadcast: ipcBroadcast(), limiter: clusterLimiter, once: ipcFirstUse(), rates: ipcRates() } })
  // Constructing one is what makes prom-client answer the primary's requests for this worker's metrics.
  new AggregatorRegistry()
  AggregatorRegistry.setRegistries([metrics.registry])
  process.on('message', (message: unknown) => {
    if (!isClusterMessage(message)) return
    if (message.portcullis === 'reload') void running.reload('SIGHUP')
    if (message.portcullis === 'readiness?') {
      const { id } = message
      void readinessProblems(running.gateway, running.config).then((problems) => toPrimary({ portcullis: 'readiness', id, problems }))
    }
  })
  toPrimary({ portcullis: 'started' })
  return running
}
