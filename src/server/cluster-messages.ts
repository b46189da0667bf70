/**
 * What the primary and its workers say to each other under `server.workers` (issue 24), over node:cluster's
 * IPC channel. Never on the request path: revocations, reloads and readiness only. Connections are spread by
 * the OS (SCHED_NONE), not passed through the primary.
 */
import cluster from 'node:cluster'
import type { Broadcast, RevocationMessage } from '../authserver/broadcast.js'

export type ClusterMessage =
  /** worker → primary: listening, ready for traffic. */
  | { readonly portcullis: 'started' }
  /** worker → primary → every other worker: a revocation, or `keys` (the signing keys in the store changed). */
  | { readonly portcullis: 'broadcast'; readonly message: RevocationMessage }
  /** primary → worker: re-read the config file (SIGHUP to the primary). */
  | { readonly portcullis: 'reload' }
  /** primary → worker, and the answer: why the worker cannot serve (empty when it can). */
  | { readonly portcullis: 'readiness?'; readonly id: number }
  | { readonly portcullis: 'readiness'; readonly id: number; readonly problems: readonly string[] }

export function isClusterMessage(value: unknown): value is ClusterMessage {
  return typeof value === 'object' && value !== null && typeof (value as { portcullis?: unknown }).portcullis === 'string'
}

/** To the primary; false when the channel is gone (the primary exited): the caller carries on alone. */
export function toPrimary(message: ClusterMessage): boolean {
  if (!cluster.isWorker || !process.connected) return false
  process.send!(message)
  return true
}

/**
 * Revocations between the workers of one primary (issue 24): what the Redis channel is between instances
 * (broadcast.ts), over IPC. IPC loses nothing while both ends live; a worker that starts later loads the
 * deny-list from the store, so there is nothing to resynchronise.
 */
export function ipcBroadcast(): Broadcast {
  let listener: ((message: unknown) => void) | undefined
  return {
    publish: async (message) => { toPrimary({ portcullis: 'broadcast', message }) },
    subscribe(onMessage) {
      listener = (message: unknown) => {
        if (isClusterMessage(message) && message.portcullis === 'broadcast') onMessage(message.message)
      }
      process.on('message', listener)
    },
    close: async () => { if (listener) process.off('message', listener) },
  }
}
