/**
 * The floors of src/ (docs/architecture.md), checked by `npm run deps` in `npm test`. Type imports count:
 * a circle of types is still a circle a reader has to hold in mind.
 */
/** The floors, bottom up: a folder imports its own floor and those below, never one above. */
const floors = [
  ['config', 'errors', 'crypto', 'common', 'redis'],
  ['metrics', 'tracing', 'audit', 'resources', 'claims', 'cors', 'decision'],
  ['dpop', 'authn', 'authz', 'ratelimit'],
  ['forward'],
  ['mcp'],
  ['authserver'],
  ['rules'],
  ['check'],
]
const folders = (names) => `^src/(${names.join('|')})/`
const ground = folders(floors[0])
const gateway = folders(floors.slice(0, 5).flat().concat('rules'))
const upward = floors.slice(0, -1).map((floor, i) => ({
  name: `floor-${i + 1}-looks-down`, severity: 'error',
  comment: `${floor.join(', ')} import nothing above their floor (docs/architecture.md).`,
  from: { path: folders(floor) },
  to: { path: `${folders(floors.slice(i + 1).flat())}|^src/(server/|cli|index\\.ts)` },
}))

module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'Imports never run in a circle.', from: {}, to: { circular: true } },
    {
      name: 'ground-stays-ground', severity: 'error',
      comment: 'The configuration shape, errors, crypto and the shared formats import nothing above the ground floor.',
      from: { path: ground }, to: { path: '^src/', pathNot: ground },
    },
    ...upward,
    {
      name: 'gateway-without-authorization-server', severity: 'error',
      comment: 'The gateway runs without the embedded authorization server: nothing on its side imports it.',
      from: { path: gateway }, to: { path: '^src/authserver/' },
    },
    {
      name: 'request-path-without-authorization-server', severity: 'error',
      comment: 'The stages of a request (src/server/stages/, the pipelines) need nothing of the embedded server.',
      from: { path: '^src/server/(stages/|pipeline|decision|runtime|request-)' }, to: { path: '^src/authserver/' },
    },
    {
      name: 'features-below-check', severity: 'error',
      comment: 'check/ composes the lint each feature exports: features and the authorization server never import it.',
      from: { path: '^src/', pathNot: '^src/(check/|server/|cli|index\\.ts)' }, to: { path: '^src/check/' },
    },
    {
      name: 'composition-root-on-top', severity: 'error',
      comment: 'server/ and the CLI wire everything; nothing below imports them.',
      from: { path: '^src/', pathNot: '^src/(server/|cli|index\\.ts)' }, to: { path: '^src/(server/|cli)' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '\\.test\\.ts$' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
}
