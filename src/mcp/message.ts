/**
 * The JSON-RPC message of an MCP POST, read from its buffered body and checked against the
 * `Mcp-Method` and `Mcp-Name` headers: MCP 2026-07-28, Streamable HTTP, "Sending Messages" (one request or
 * notification per POST; JSON-RPC batching was removed in 2025-06-18) and "Request Metadata" (the headers
 * mirror `method` and `params.name` / `params.uri`; servers that read the body MUST refuse a request whose
 * headers disagree with it, 400). Every refusal is MalformedRequest: 400 invalid_request, nothing forwarded.
 */
import type { IncomingMessage } from 'node:http'
import { MalformedRequest } from '../errors/oauth-errors.js'
import { JsonProblem, parseStrictJson, type JsonValue } from './json.js'
import { foldName, KNOWN_BY_FOLD, KNOWN_METHODS, NAMED_BY, NAMED_METHODS } from './names.js'

/** What the rules read of a message. */
export interface McpMessage {
  /** undefined for a JSON-RPC response (2025-11-25 clients POST their answers to the server's requests). */
  readonly method: string | undefined
  /**
   * `params.name` (`tools/call`, `prompts/get`) or `params.uri` (`resources/read`); for other methods
   * whichever of the two is a string, which `Mcp-Name` then has to equal.
   */
  readonly name: string | undefined
}

// RFC 8259 §8.1 and MCP (JSON-RPC messages MUST be UTF-8): a charset parameter, if any, says so.
const JSON_CONTENT_TYPE = /^application\/json[ \t]*(?:;[ \t]*charset[ \t]*=[ \t]*(?:utf-8|"utf-8")[ \t]*)?$/i
// A plain header value (MCP "Value Encoding"): visible ASCII and inner spaces; anything else arrives Base64-encoded.
const PLAIN_VALUE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/
// Clients MUST encode a plain value that looks like the sentinel too: whatever wears its markers is Base64.
const SENTINEL = /^=\?base64\?(.*)\?=$/s
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

function refuse(description: string, detail?: string): never {
  throw new MalformedRequest(description, { detail: `mcp: ${detail ?? description}` })
}

/** For the log: a client's value, quoted, cut short. */
function shown(value: string | undefined): string {
  return value === undefined ? 'none' : JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)
}

function decodeBody(body: Buffer, req: IncomingMessage): JsonValue {
  const contentType = req.headers['content-type']
  if (!JSON_CONTENT_TYPE.test(contentType ?? '')) {
    refuse('an MCP message is sent as application/json (UTF-8)', `content-type ${shown(contentType)}`)
  }
  // The bytes read here are the message: an upstream that decoded them first would read another one.
  const encoding = req.headers['content-encoding']
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') refuse('an MCP message is sent without a content-coding', `content-encoding ${shown(encoding)}`)
  let text: string
  try {
    text = utf8.decode(body)
  } catch {
    return refuse('the MCP message is not valid UTF-8')
  }
  if (text.charCodeAt(0) === 0xfeff) refuse('the MCP message starts with a byte order mark')
  try {
    return parseStrictJson(text)
  } catch (error) {
    if (!(error instanceof JsonProblem)) throw error
    return refuse('the MCP message is not one unambiguous JSON value', `body: ${error.message}`)
  }
}

/** The JSON-RPC 2.0 envelope: one object, a request, notification or response. */
function envelope(value: JsonValue): McpMessage {
  if (Array.isArray(value)) {
    refuse('JSON-RPC batches are not accepted: an MCP POST carries one message (batching was removed in MCP 2025-06-18)')
  }
  if (value === null || typeof value !== 'object') refuse('the MCP message is not a JSON-RPC object')
  if (value.jsonrpc !== '2.0') refuse('the MCP message is not JSON-RPC 2.0')
  if (!Object.hasOwn(value, 'method')) {
    if (Object.hasOwn(value, 'id') && (Object.hasOwn(value, 'result') || Object.hasOwn(value, 'error'))) return { method: undefined, name: undefined }
    refuse('the MCP message is neither a JSON-RPC request, notification nor response')
  }
  const method = value.method
  if (typeof method !== 'string') return refuse('the JSON-RPC method is not a string')
  refuseVariant(method)
  const params = value.params
  if (params !== undefined && (params === null || typeof params !== 'object' || Array.isArray(params))) {
    refuse('the JSON-RPC params of an MCP message are an object')
  }
  const members = params as { [key: string]: JsonValue } | undefined
  const named = NAMED_BY.get(method)
  if (named !== undefined) {
    const name = members?.[named]
    if (typeof name !== 'string') return refuse(`${method} names its target in params.${named}, a string`)
    return { method, name }
  }
  const name = members?.name
  const uri = members?.uri
  return { method, name: typeof name === 'string' ? name : typeof uri === 'string' ? uri : undefined }
}

/** A spelling of a known method other than its own: an upstream that matched methods loosely would run `TOOLS/CALL` as tools/call, around its rules. */
function refuseVariant(method: string): void {
  const known = KNOWN_METHODS.has(method) ? method : KNOWN_BY_FOLD.get(foldName(method))
  if (known !== undefined && known !== method) refuse('MCP method names are case-sensitive', `method ${shown(method)} is a variant of ${known}`)
}

/** The one value of a header; sent twice (`Mcp-Name: a` and `Mcp-Name: b`) it names nothing for certain. */
function single(req: IncomingMessage, header: 'mcp-method' | 'mcp-name'): string | undefined {
  const values = req.headersDistinct[header]
  if (values === undefined) return undefined
  if (values.length > 1) refuse(`the ${header === 'mcp-method' ? 'Mcp-Method' : 'Mcp-Name'} header is sent more than once`)
  return values[0]
}

/** `Mcp-Name` as the body spells it: plain, or the Base64 sentinel form (MCP "Value Encoding") decoded. */
function decodeName(value: string): string {
  const encoded = SENTINEL.exec(value)
  if (encoded === null) {
    if (!PLAIN_VALUE.test(value)) refuse('the Mcp-Name header has characters a plain value may not carry')
    return value
  }
  const base64 = encoded[1]!
  if (!BASE64.test(base64)) refuse('the Mcp-Name header is not valid Base64')
  try {
    return utf8.decode(Buffer.from(base64, 'base64'))
  } catch {
    return refuse('the Mcp-Name header is not Base64 of UTF-8 text')
  }
}

/**
 * The headers against the body. None of them (clients of 2025-11-25 and earlier): the body alone decides.
 * `Mcp-Method` given: it must equal `method`, and `Mcp-Name` must be given and equal the name for the three
 * methods that name a target (2026-07-28 makes both REQUIRED there). Values compare exactly (case-sensitive).
 */
function checkHeaders(req: IncomingMessage, message: McpMessage): void {
  const methodHeader = single(req, 'mcp-method')
  const nameHeader = single(req, 'mcp-name')
  if (methodHeader === undefined) {
    if (nameHeader !== undefined) refuse('the Mcp-Name header needs an Mcp-Method header')
    return
  }
  if (!PLAIN_VALUE.test(methodHeader)) refuse('the Mcp-Method header has characters a method name may not carry')
  if (methodHeader !== message.method) {
    refuse('the Mcp-Method header does not match the JSON-RPC method', `Mcp-Method ${shown(methodHeader)}, body method ${shown(message.method)}`)
  }
  if (nameHeader === undefined) {
    if (NAMED_METHODS.has(methodHeader)) refuse(`the Mcp-Name header is required with Mcp-Method: ${methodHeader}`)
    return
  }
  const name = decodeName(nameHeader)
  if (name !== message.name) {
    refuse('the Mcp-Name header does not match the JSON-RPC params', `Mcp-Name ${shown(name)}, body ${shown(message.name)}`)
  }
}

/** The message of an MCP POST's body, or MalformedRequest (400) for what the gateway cannot read one way only. */
export function readMessage(req: IncomingMessage, body: Buffer): McpMessage {
  const message = envelope(decodeBody(body, req))
  checkHeaders(req, message)
  return message
}

/**
 * The message as its headers name it, for a decision that never sees the body (the decision mode; MCP 2026-07-28,
 * "Standard Request Headers": `Mcp-Method` on every request and notification, `Mcp-Name` with the methods that name
 * a target). Undefined without `Mcp-Method` (a client of 2025-11-25 or earlier). The checks are those made against
 * a body: one value each, a method spelled exactly, a target named where the method has one, a name plain or in
 * the Base64 form. That the body says the same is the MCP server's to check (Server Validation).
 */
export function messageFromHeaders(req: IncomingMessage): McpMessage | undefined {
  const method = single(req, 'mcp-method')
  const nameHeader = single(req, 'mcp-name')
  if (method === undefined) {
    if (nameHeader !== undefined) refuse('the Mcp-Name header needs an Mcp-Method header')
    return undefined
  }
  if (!PLAIN_VALUE.test(method)) refuse('the Mcp-Method header has characters a method name may not carry')
  refuseVariant(method)
  if (nameHeader === undefined) {
    if (NAMED_METHODS.has(method)) refuse(`the Mcp-Name header is required with Mcp-Method: ${method}`)
    return { method, name: undefined }
  }
  return { method, name: decodeName(nameHeader) }
}
