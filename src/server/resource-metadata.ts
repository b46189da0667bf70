/**
 * RFC 9728 §3: the protected-resource metadata documents, served by the pipeline before route matching (so a
 * reload that changes `resources:` changes them too, and no route, not even a catch-all, can shadow one).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { CompiledResource } from '../resources/metadata.js'

/** Answers the request when `path` is a resource's metadata URL; false otherwise (the request goes on). */
export function serveResourceMetadata(documents: ReadonlyMap<string, CompiledResource>, req: IncomingMessage,
  res: ServerResponse, path: string): boolean {
  const resource = documents.get(path)
  if (resource === undefined) return false
  const method = req.method
  // A public document: any origin may read it (browser-based clients discover the API from it).
  const headers: Record<string, string> = { 'access-control-allow-origin': '*', 'cache-control': 'public, max-age=300' }
  if (method === 'OPTIONS') {
    res.writeHead(204, { ...headers, 'access-control-allow-methods': 'GET, HEAD', 'access-control-max-age': '86400', allow: 'GET, HEAD, OPTIONS' })
    res.end()
    return true
  }
  if (method !== 'GET' && method !== 'HEAD') {
    const body = JSON.stringify({ error: 'method_not_allowed', error_description: 'this path does not accept this method' })
    res.writeHead(405, { allow: 'GET, HEAD, OPTIONS', 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) })
    res.end(body)
    return true
  }
  res.writeHead(200, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(resource.document) })
  res.end(method === 'HEAD' ? undefined : resource.document)
  return true
}
