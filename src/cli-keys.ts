/**
 * `portcullis keys rotate` and `portcullis keys rekey`: the signing keys in the store of the config's
 * authorization server, changed while no gateway needs to stop.
 */
import { existsSync } from 'node:fs'
import { ConfigError, loadConfigFile } from './check/load.js'
import { describeRedisUrl } from './redis/url.js'
import type { AuthServerSettings } from './authserver/settings.js'
import type { StorageAdapter } from './authserver/storage/adapter.js'
import { oneLine, readStdin } from './cli-io.js'

/**
 * The store of the authorization server in the config file, opened, for `keys rotate` and `keys rekey`;
 * or the exit status after printing why not. The store must exist and hold keys: a store created here
 * would hold keys no gateway uses.
 */
async function openKeyStore(verb: string, configFile: string): Promise<{ settings: AuthServerSettings; store: StorageAdapter } | number> {
  let config
  try {
    config = loadConfigFile(configFile)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    console.error(error.message)
    return 1
  }
  const as = config.authorization_server
  if (!as?.enabled) {
    console.error(`${verb}: the authorization server is not enabled in ${configFile}`)
    return 1
  }
  const [{ resolveSettings }, { openStore }] = await Promise.all([import('./authserver/settings.js'), import('./authserver/store.js')])
  const settings = resolveSettings(as)
  if (settings.store.type === 'memory') {
    console.error(`${verb}: a memory store lives inside the gateway process; there is nothing to change from here`)
    return 1
  }
  const redis = settings.store.type === 'redis'
  // The store's address for messages: the file, or the Redis host (never the URL: it may hold a password).
  const where = redis ? `the Redis store (${describeRedisUrl(settings.store.url!)})` : settings.store.path
  // Opening a missing file would create an empty store, and keys no gateway uses.
  if (!redis && !existsSync(settings.store.path)) {
    console.error(`${verb}: no store at ${where} (start the gateway once to create it and its keys)`)
    return 1
  }
  let store
  try {
    store = await openStore(settings)
    await store.ping()
    // Likewise in Redis: an empty store has never served; keys made here would be used by no gateway.
    if (redis && (await store.list('signing_key')).length === 0) {
      console.error(`${verb}: no signing keys in ${where} (start the gateway once to create them)`)
      await store.close()
      return 1
    }
  } catch (error) {
    console.error(`${verb}: cannot open the store at ${where}: ${oneLine(error)}`)
    await store?.close().catch(() => {})
    return 1
  }
  return { settings, store }
}

/** `portcullis keys rotate`: signing key rotation (new keys published `signing.rotation_publish_delay` before they sign), done on the store the gateway uses; running gateways pick it up on reload. */
export async function rotateKeys(configFile: string): Promise<number> {
  const opened = await openKeyStore('keys rotate', configFile)
  if (typeof opened === 'number') return opened
  const { settings, store } = opened
  try {
    const { KeyManager, keyRetirementSeconds } = await import('./authserver/keys.js')
    const warn = (fields: unknown, message?: string) => console.error(`keys rotate: warning: ${message ?? ''} ${JSON.stringify(fields)}`)
    const keys = await KeyManager.open(store, {
      algorithm: settings.algorithm,
      publishDelayMs: settings.publishDelayMs,
      retireAfterSeconds: keyRetirementSeconds(settings),
      now: Date.now,
      log: { info: () => {}, warn },
      reloadIntervalMs: 0,
      ...(settings.keyEncryption && { keyEncryption: settings.keyEncryption }),
    })
    const { added, retiring, activatesAt, retiresAt } = await keys.rotate()
    keys.close()
    for (const kid of added) console.log(`added ${kid}`)
    for (const kid of retiring) console.log(`retiring ${kid}`)
    console.log(`new keys sign from ${new Date(activatesAt).toISOString()}; retiring keys leave the JWKS at ${new Date(retiresAt).toISOString()}`)
    // Running instances re-read the store every 30 s; on Redis they are told at once.
    if (settings.store.type === 'redis') await announceKeys(settings.store.url!, settings.store.prefix, warn)
    return 0
  } catch (error) {
    console.error(`keys rotate: ${oneLine(error)}`)
    return 1
  } finally {
    await store.close()
  }
}

/**
 * `portcullis keys rekey`: every private signing key in the store re-encrypted under the key read on
 * standard input (never from argv: it would land in shell history and `ps`). The current key is the config's
 * key_encryption_key. Running gateways keep the keys they loaded; they need the new key before their next start.
 */
export async function rekeyKeys(configFile: string): Promise<number> {
  const { KeyEncryptionKey, KEK_CONFIG_KEY, KEK_FORMAT, rekeySigningKeys } = await import('./authserver/key-encryption.js')
  const text = await readStdin()
  if (text === '') {
    console.error('keys rekey: no new key on standard input (openssl rand -base64 32 makes one)')
    return 1
  }
  let next
  try {
    next = KeyEncryptionKey.parse(text)
  } catch {
    // Never echo what was read: it is meant to be a secret.
    console.error(`keys rekey: the new key on standard input ${KEK_FORMAT}`)
    return 1
  }
  const opened = await openKeyStore('keys rekey', configFile)
  if (typeof opened === 'number') return opened
  const { settings, store } = opened
  try {
    const { rekeyed, unchanged } = await rekeySigningKeys(store, settings.keyEncryption, next)
    if (rekeyed.length + unchanged.length === 0) {
      console.error('keys rekey: no signing keys in the store (start the gateway once to create them)')
      return 1
    }
    for (const kid of rekeyed) console.log(`rekeyed ${kid}`)
    for (const kid of unchanged) console.log(`unchanged ${kid} (already under the new key)`)
    console.log(`every signing key is encrypted with key id ${next.id}: set ${KEK_CONFIG_KEY} to the new key, then restart each gateway`)
    return 0
  } catch (error) {
    console.error(`keys rekey: ${oneLine(error)}`)
    return 1
  } finally {
    await store.close()
  }
}

/** Tells the instances sharing the Redis store that the signing keys changed (they publish the new ones at once). */
async function announceKeys(url: string, prefix: string, warn: (fields: unknown, message?: string) => void): Promise<void> {
  const { createRedisBroadcast, revocationChannel } = await import('./authserver/broadcast.js')
  const broadcast = createRedisBroadcast(url, revocationChannel(prefix), { debug: () => {}, warn, error: warn })
  try {
    await broadcast.publish({ keys: true })
  } finally {
    await broadcast.close()
  }
}
