export { buildGateway, type GatewayOptions } from './server/gateway.js'
export { loadConfig, loadConfigFile, ConfigError, type ConfigIssue } from './check/load.js'
export type { GatewayConfig } from './config/schema.js'
export * from './errors/oauth-errors.js'
