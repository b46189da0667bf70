/** What every check of the configuration reports (the schema's, each feature's lint, the route compiler's). */
export interface Problem {
  /** Where in the YAML: keys and indexes from the top (`['routes', 3, 'scopes']`). */
  path: Array<string | number>
  message: string
  /** Located at the key (a header name) rather than its value. */
  atKey?: boolean
}
