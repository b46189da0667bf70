import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'bench/results/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-console': ['error', { allow: ['log', 'error'] }],
      eqeqeq: ['error', 'always'],
    },
  },
  { files: ['src/**/*.ts'], ignores: ['src/cli.ts'], rules: { 'no-console': 'error' } },
  {
    // bench/otel-auto.cjs is preloaded with `node --require`: CommonJS on purpose.
    files: ['bench/**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', process: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // dependency-cruiser reads its config with require().
    files: ['.dependency-cruiser.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable' } },
  },
  {
    files: ['bench/**/*.mjs', 'examples/**/*.mjs', 'scripts/**/*.mjs'],
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', setTimeout: 'readonly', fetch: 'readonly', globalThis: 'readonly', URLSearchParams: 'readonly', URL: 'readonly' },
    },
  },
)
