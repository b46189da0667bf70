/**
 * An MCP server built with the official SDK (Streamable HTTP, stateless: one server and transport per
 * request), with no authorization code of its own: what a team puts behind Portcullis. Tools: `echo`,
 * `count` (streams a progress notification per step over SSE before its result) and `delete_order`. It
 * records the Authorization header of every request it gets (the gateway must never pass a token through).
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'

export interface TestMcpServer {
  url: string
  /** The Authorization header of each request received (undefined when absent). */
  authorizations: Array<string | undefined>
  /** Tool names called, in order. */
  calls: string[]
  close(): Promise<void>
}

function mcpServer(calls: string[]): McpServer {
  const server = new McpServer({ name: 'orders', version: '1.0.0' })
  server.registerTool('echo', { description: 'Echoes its text', inputSchema: { text: z.string() } }, ({ text }) => {
    calls.push('echo')
    return { content: [{ type: 'text', text }] }
  })
  server.registerTool('count', { description: 'Counts to n, reporting progress', inputSchema: { n: z.number().int().min(1).max(20) } },
    async ({ n }, extra) => {
      calls.push('count')
      const progressToken = extra._meta?.progressToken
      for (let i = 1; i <= n; i++) {
        if (progressToken !== undefined) {
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: i, total: n } })
        }
      }
      return { content: [{ type: 'text', text: `counted to ${n}` }] }
    })
  server.registerTool('delete_order', { description: 'Deletes an order', inputSchema: { id: z.string() } }, ({ id }) => {
    calls.push('delete_order')
    return { content: [{ type: 'text', text: `deleted ${id}` }] }
  })
  return server
}

export async function startMcpServer(): Promise<TestMcpServer> {
  const state = { authorizations: [] as Array<string | undefined>, calls: [] as string[] }
  const server = http.createServer((req, res) => {
    state.authorizations.push(req.headers.authorization)
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      void (async () => {
        const text = Buffer.concat(chunks).toString('utf8')
        const body: unknown = text === '' ? undefined : JSON.parse(text)
        const mcp = mcpServer(state.calls)
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined })
        res.on('close', () => { void transport.close(); void mcp.close() })
        await mcp.connect(transport)
        await transport.handleRequest(req, res, body)
      })().catch((error: unknown) => {
        if (!res.headersSent) res.writeHead(500)
        res.end(String(error))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    ...state,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
