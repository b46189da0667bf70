/** Two RFC 9728 resources on one gateway, `${origin}/api` and `${origin}/billing`, for RFC 8707 tests. */
export function twoResources(origin: string): { orders: string; billing: string; extra: Record<string, unknown> } {
  const [orders, billing] = [`${origin}/api`, `${origin}/billing`]
  return {
    orders,
    billing,
    extra: {
      server: { public_url: origin },
      routes: [
        { id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' },
        { id: 'billing', path: '/billing/**', upstream: 'echo', auth: 'required' },
      ],
      resources: [{ resource: orders, routes: ['api'] }, { resource: billing, routes: ['billing'] }],
    },
  }
}
