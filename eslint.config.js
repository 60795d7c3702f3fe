import neostandard from 'neostandard'
import importX, { createNodeResolver } from 'eslint-plugin-import-x'

const ENTRY_FILES = ['app.ts', 'server.ts', 'settings.ts']
const PRODUCT = [...ENTRY_FILES, 'plugins', 'routes', 'integrations', 'schemas', 'lib']

/** What the files under `target` must not import: `from`, each a file or a folder of the root. */
const zone = (target, from, message) => ({ target, from, message })

// Imports point one way: routes → plugins → integrations → lib, schemas beside lib; product code
// never imports the harness (dev/, test/), which the production build and image leave out.
const LAYERS = [
  zone(PRODUCT.map((path) => path.endsWith('.ts') ? path : `${path}/**`), ['dev', 'test'], 'Product code never imports dev/ or test/: neither is in the production build.'),
  zone('lib/**', [...ENTRY_FILES, 'plugins', 'routes', 'integrations', 'schemas'], 'lib/ is generic: it imports only lib/.'),
  zone('schemas/**', [...ENTRY_FILES, 'plugins', 'routes', 'integrations'], 'schemas/ imports only schemas/ and lib/.'),
  zone('integrations/**', [...ENTRY_FILES, 'plugins', 'routes', 'schemas'], 'integrations/ imports only integrations/ and lib/.'),
  zone('plugins/**', [...ENTRY_FILES, 'routes'], 'plugins/ imports only plugins/, integrations/, schemas/ and lib/.'),
  zone('routes/**', ENTRY_FILES, 'routes/ never imports the entry files.')
]

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'dist-dev/**', 'coverage/**', '.tap/**', 'logs/**'] }),
  {
    rules: {
      // TypeBox's idiom gives a schema and its Static type the same name.
      '@typescript-eslint/no-redeclare': 'off'
    }
  },
  {
    files: PRODUCT.map((path) => path.endsWith('.ts') ? path : `${path}/**/*.ts`),
    plugins: { 'import-x': importX },
    settings: {
      // `./x.js` names the source `x.ts`, as TypeScript's NodeNext resolution reads it.
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js', '.json'], extensionAlias: { '.js': ['.ts', '.js'] } })]
    },
    rules: {
      'import-x/no-restricted-paths': ['error', { basePath: import.meta.dirname, zones: LAYERS }],
      // An import the rule above cannot read must not slip past it.
      'import-x/no-unresolved': ['error', { ignore: ['^[^.]'] }],
      'no-restricted-syntax': ['error',
        { selector: 'ImportExpression[source.type!="Literal"]', message: 'import() of a computed specifier: its layer cannot be checked.' },
        { selector: 'TSImportType', message: 'Use `import type` at the top: an import() type escapes the layer check.' }
      ]
    }
  }
]
