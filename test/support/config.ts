/**
 * The smallest config text `portcullis check` accepts: one upstream `main` (at 127.0.0.1:9001, where nothing
 * listens: nothing is forwarded by the tests that load it) and one catch-all route `all` to it. Seven lines, each
 * ending in a newline, so `extra` starts on line 8 at the top level (tests assert line numbers against that).
 */
export function minimalConfig(extra = ''): string {
  return `upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
  - id: all
    path: "/**"
    upstream: main
${extra}`
}
