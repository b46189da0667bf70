export { buildGateway, type GatewayOptions } from './gateway.js'
export { loadConfig, loadConfigFile, ConfigError, type ConfigIssue } from './config/load.js'
export type { GatewayConfig } from './config/schema.js'
export * from './errors/oauth-errors.js'
