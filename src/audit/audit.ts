/**
 * The audit trail: one JSON line per security event, `{"time":"<ISO 8601>","event":"token.issued",…}`, on a
 * pino logger of its own (never the request log), written to `audit.output`: stdout, files, or both.
 * Events name clients, subjects, jtis and grants; never a token, code, secret or password. docs/audit.md
 * lists every event and its fields: they are a stable interface, so add fields, never rename them.
 */
import path from 'node:path'
import { pino, type DestinationStream } from 'pino'
import type { AuditConfig } from '../config/schema.js'

/** Where the event happened, when it happened in a request. */
interface RequestFields {
  /** The caller's address. */
  readonly ip?: string
  /** The request id of the request log's lines for the same request. */
  readonly req_id?: string
}

/** A token endpoint success: what was issued, to whom; never the token itself. */
interface TokenFields extends RequestFields {
  readonly grant_type: string
  readonly client_id: string
  readonly sub?: string
  /** The access token's jti (JWT claim or opaque token record). */
  readonly jti?: string
  /** The refresh family the tokens belong to. */
  readonly grant_id?: string
  readonly scope: string
  readonly refresh_token_issued: boolean
  readonly id_token_issued: boolean
}

interface DecisionFields extends RequestFields {
  readonly sub: string
  readonly client_id: string
  readonly scope: string
}

/** Every event and its fields (docs/audit.md). */
export interface AuditEvents {
  'token.issued': TokenFields
  'token.refreshed': TokenFields
  'token.revoked': RequestFields & {
    readonly client_id: string
    readonly sub: string
    readonly token_type: 'access_token' | 'refresh_token'
    /** Access tokens: the one revoked. */
    readonly jti?: string
    /** Refresh tokens: the grant revoked with it, access tokens included (RFC 7009 §2.1: revoking a refresh token may revoke the grant's access tokens). */
    readonly grant_id: string
  }
  'client.authentication_failed': RequestFields & {
    /** As presented, cut to 64 characters; absent when none was. */
    readonly client_id?: string
    readonly method?: string
    readonly reason: 'malformed_credentials' | 'no_client_id' | 'unsupported_method' | 'unknown_client' | 'public_client_sent_secret'
      | 'no_secret' | 'wrong_secret' | 'wrong_certificate'
    /** The endpoint path. */
    readonly endpoint?: string
  }
  'login.succeeded': RequestFields & {
    readonly sub: string
    readonly username: string
    readonly flow: 'authorize' | 'device'
    readonly client_id?: string
    /** A sign-in at an identity provider: its `identity_providers[].id`. */
    readonly provider?: string
  }
  'federation.failed': RequestFields & {
    readonly provider: string
    readonly reason: 'callback_unknown' | 'callback_replayed' | 'callback_other_browser' | 'callback_other_provider'
      | 'upstream_error' | 'upstream_unavailable' | 'upstream_response_refused' | 'not_allowed'
    /** The provider's error code (`upstream_error`), at most 64 characters. */
    readonly error?: string
    /** Why the account may not sign in (`not_allowed`): the allow rule or the claim that failed. */
    readonly detail?: string
  }
  'logout': RequestFields & {
    readonly sub: string
    readonly client_id?: string
    readonly provider?: string
  }
  'account.gone': {
    readonly sub: string
    readonly provider: string
  }
  'login.failed': RequestFields & {
    /** As typed, cut to 64 characters. */
    readonly username: string
    readonly reason: 'invalid_credentials'
  }
  'consent.granted': DecisionFields & { readonly remembered: boolean }
  'consent.denied': DecisionFields
  'refresh_token.reuse_detected': RequestFields & {
    readonly client_id: string
    readonly sub: string
    readonly grant_id: string
    readonly grant_revoked: true
  }
  'refresh_token.replayed_in_grace': RequestFields & {
    readonly client_id: string
    readonly sub: string
    readonly grant_id: string
  }
  'device_code.replay_detected': RequestFields & {
    readonly client_id: string
    readonly sub?: string
    /** The grant the first redemption started, revoked now. */
    readonly grant_id: string
    readonly grant_revoked: true
  }
  'authorization_code.replay_detected': RequestFields & {
    readonly client_id: string
    readonly sub: string
    /** The grant the first redemption started; absent when that one had not recorded it yet (it revokes it itself). */
    readonly grant_id?: string
    readonly grant_revoked: true
  }
  'device_code.approved': DecisionFields
  'device_code.denied': DecisionFields
  /** A client registered itself at /register (RFC 7591 §3); never its secret or registration access token. */
  'client.registered': RequestFields & {
    readonly client_id: string
    /** As the client named itself (unverified). */
    readonly client_name?: string
    readonly token_endpoint_auth_method: string
    readonly grant_types: readonly string[]
    readonly redirect_uris: readonly string[]
    readonly scope: string
    readonly software_id?: string
    readonly software_version?: string
  }
  /** A registration was deleted with its registration access token (RFC 7592 §2.3). */
  'client.registration_deleted': RequestFields & { readonly client_id: string }
  'client.registration_updated': RequestFields & {
    readonly client_id: string; readonly grant_types: readonly string[]; readonly redirect_uris: readonly string[]; readonly scope: string
  }
  'throttle.engaged': {
    /** `failures` (client authentication, password grant, login), `user-codes` (/device), `interactions`, `registrations`. */
    readonly throttle: string
    /** `client:<id>`, `ip:<address>`, `user:<name>` or `session:<sha-256 of the cookie>`. */
    readonly key: string
    readonly retry_after: number
  }
  'config.reloaded': {
    readonly trigger: string
    readonly sha256: string
    readonly needs_restart: readonly string[]
  }
  'config.reload_failed': {
    readonly trigger: string
    readonly reason: 'unreadable' | 'invalid' | 'rejected'
    readonly problems: number
  }
}

export type AuditEventName = keyof AuditEvents

export interface AuditLog {
  /** Writes one line. Never throws: a failing output is reported to `onError`. */
  emit<E extends AuditEventName>(event: E, fields: AuditEvents[E]): void
  /** Flushes and closes the files (stdout stays open). */
  close(): Promise<void>
}

export interface AuditLogOptions {
  /** Where the lines go instead of `audit.output` (tests, embedding). */
  stream?: NodeJS.WritableStream
  /** Milliseconds since the epoch, for `time`. */
  now?: () => number
  /** Told when an output cannot be written (the request log says so). */
  onError?: (error: unknown) => void
}

/** Discards everything: for contexts built by hand. */
export const silentAudit: AuditLog = { emit: () => {}, close: async () => {} }

/** `audit.output` as a list; absent means stdout. */
export function auditOutputs(config: AuditConfig | undefined): string[] {
  const output = config?.output ?? 'stdout'
  return typeof output === 'string' ? [output] : [...output]
}

interface FileDestination extends DestinationStream {
  flushSync(): void
  end(): void
  on(event: 'error', listener: (error: unknown) => void): unknown
}

function openFile(file: string, onError: (error: unknown) => void): FileDestination {
  try {
    // Synchronous appends: the line is written before the response that the event concerns goes out.
    const destination = pino.destination({ dest: path.resolve(file), mkdir: true, sync: true, append: true }) as unknown as FileDestination
    destination.on('error', onError)
    return destination
  } catch (error) {
    throw new Error(`audit.output ${file} cannot be opened: ${(error as Error).message}`, { cause: error })
  }
}

/** Opens the outputs of `audit:` (a relative path resolves against the working directory; loadConfig makes it absolute). */
export function createAuditLog(config: AuditConfig | undefined, options: AuditLogOptions = {}): AuditLog {
  const now = options.now ?? Date.now
  const onError = options.onError ?? (() => {})
  const files: FileDestination[] = []
  let destination: DestinationStream
  if (options.stream) {
    destination = options.stream
  } else {
    const streams = auditOutputs(config).map((output) => {
      if (output === 'stdout') return pino.destination({ dest: 1, sync: true })
      const file = openFile(output, onError)
      files.push(file)
      return file
    })
    destination = streams.length === 1 ? streams[0]! : pino.multistream(streams.map((stream) => ({ stream })))
  }
  const logger = pino({
    base: null,
    // No level (an audit line is not a diagnostic), so the line starts `{` and `time` needs no leading comma.
    formatters: { level: () => ({}) },
    timestamp: () => `"time":"${new Date(now()).toISOString()}"`,
  }, destination)
  return {
    emit(event, fields) {
      try {
        logger.info({ event, ...fields })
      } catch (error) {
        onError(error)
      }
    },
    async close() {
      for (const file of files) {
        try {
          file.flushSync()
        } catch (error) {
          onError(error)
        }
        file.end()
      }
    },
  }
}
