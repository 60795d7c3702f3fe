import neostandard from 'neostandard'
import importX, { createNodeResolver } from 'eslint-plugin-import-x'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'

const ENTRY_FILES = ['app.ts', 'server.ts', 'settings.ts']
const PRODUCT = [...ENTRY_FILES, 'plugins', 'routes', 'integrations', 'schemas', 'lib']

/** The formatter's line width, which the linter enforces on product code (docs/development.md). */
const MAX_LINE_LENGTH = 120
// A line that holds one string literal and at most its key, the `+` that joins it to the next, and closers.
const LONE_STRING = /^\s*(?:[\w$]+: |\+ )?(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")(?: \+|\)*,?|\)*)\s*$/

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

// A concern is a folder under plugins/app/ with an index.ts, its one entry: the rest of the folder is private
// to it (decision 0130). Type-only imports pass both rules below: they load and run nothing, and a
// decorator's type is declared beside the plugin that makes it, where its readers must find it.
const CONCERNS_ROOT = join(import.meta.dirname, 'plugins', 'app')

/**
 * Imports the two rules below let through, each with its reason: keep this list short. `to`: the files
 * imported; `from`: the one importer allowed (any, when absent).
 */
export const LAYOUT_EXCEPTIONS = [
  {
    to: ['alerts', 'levels', 'metrics', 'thresholds', 'upstream-rows'].map((name) => `plugins/app/monitoring/${name}.ts`),
    reason: 'The thresholds table and its judgement are data every concern that judges a value reads (the style\'s one table): ' +
      'the monitoring folder holds them until they move out of it.'
  },
  {
    from: 'app.ts',
    to: ['plugins/app/database/index.ts'],
    reason: 'build() sizes Fastify\'s plugin timeout from the migration\'s bound (migrationBoundMs) before any plugin exists.'
  }
]

/** The concern folders (absolute paths) under `concernsRoot`, nested ones too. */
function concernFolders (concernsRoot) {
  if (!existsSync(concernsRoot)) return []
  return readdirSync(concernsRoot, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isDirectory() && existsSync(join(entry.parentPath, entry.name, 'index.ts')))
    .map((entry) => join(entry.parentPath, entry.name))
}

const inside = (folder, file) => file.startsWith(folder + sep)

/** The source file a relative specifier names (`./x.js` names `x.ts`), or undefined for a package. */
function targetOf (importer, specifier) {
  if (typeof specifier !== 'string' || !specifier.startsWith('.')) return undefined
  const path = resolve(dirname(importer), specifier)
  const source = path.replace(/\.js$/, '.ts')
  return existsSync(source) ? source : path
}

/** Whether `name`, a top-level binding of `source`, is a Fastify plugin: made by fastify-plugin, or typed as one. */
function namesPlugin (source, name) {
  const fp = /^import (\w+) from 'fastify-plugin'/m.exec(source)?.[1]
  const escaped = name.replace(/\$/g, '\\$')
  return (fp !== undefined && new RegExp(`^(?:export )?const ${escaped} = ${fp}\\(`, 'm').test(source)) ||
    new RegExp(`^(?:export )?const ${escaped}: FastifyPluginAsync\\w*(?:<[^>]*>)? =`, 'm').test(source) ||
    new RegExp(`^(?:export )?(?:async )?function ${escaped} \\(\\w+: FastifyInstance\\b`, 'm').test(source)
}

/** Whether a file's default export is a Fastify plugin (a plugin file). */
function isPluginFile (file) {
  if (!file.endsWith('.ts') || !existsSync(file)) return false
  const source = readFileSync(file, 'utf8')
  const fp = /^import (\w+) from 'fastify-plugin'/m.exec(source)?.[1]
  if (fp !== undefined && new RegExp(`^export default ${fp}\\(`, 'm').test(source)) return true
  const named = /^export default (\w+)\s*$/m.exec(source)?.[1]
  return named !== undefined && namesPlugin(source, named)
}

/** Whether the export `name` of `file` is a plugin too (`export const docsUi = fp(…)`, `export { default as routes } from './routes.js'`). */
function exportsPlugin (file, name) {
  const source = readFileSync(file, 'utf8')
  if (namesPlugin(source, name)) return true
  const reexport = new RegExp(`^export \\{[^}]*?\\b(?:(\\w+) as )?${name}\\b[^}]*\\} from '([^']+)'`, 'm').exec(source)
  if (reexport === null) return false
  const [, original = name, specifier] = reexport
  const target = targetOf(file, specifier)
  return original === 'default' ? isPluginFile(target) : existsSync(target) && exportsPlugin(target, original)
}

const typeOnly = (node) => node.importKind === 'type' || node.exportKind === 'type'

/** Calls `check(node, target)` for each relative import or re-export of a value. */
function eachImport (context, check) {
  const importer = context.filename
  const visit = (node) => {
    if (typeOnly(node)) return
    const target = targetOf(importer, node.source?.value)
    if (target !== undefined) check(node, target)
  }
  return { ImportDeclaration: visit, ExportNamedDeclaration: visit, ExportAllDeclaration: visit, ImportExpression: visit }
}

const excepted = (context, target) => {
  const from = relative(import.meta.dirname, context.filename).split(sep).join('/')
  const to = relative(import.meta.dirname, target).split(sep).join('/')
  return LAYOUT_EXCEPTIONS.some((exception) => (exception.from === undefined || exception.from === from) && exception.to.includes(to))
}

const layout = {
  rules: {
    'concern-entry': {
      meta: { type: 'problem', schema: [], messages: { private: '{{target}} is private to the concern {{concern}}/: import its entry, {{concern}}/index.ts.' } },
      create (context) {
        const folders = concernFolders(CONCERNS_ROOT)
        return eachImport(context, (node, target) => {
          if (excepted(context, target)) return
          for (const folder of folders) {
            if (inside(folder, target) && !inside(folder, context.filename) && target !== join(folder, 'index.ts')) {
              const name = (path) => relative(import.meta.dirname, path).split(sep).join('/')
              context.report({ node, messageId: 'private', data: { target: name(target), concern: name(folder) } })
              return
            }
          }
        })
      }
    },
    'plugin-not-library': {
      meta: { type: 'problem', schema: [], messages: { library: '{{target}} is a plugin file: from outside its folder, import only its plugin{{names}}.' } },
      create (context) {
        const folders = concernFolders(CONCERNS_ROOT)
        // A plugin file's folder: the innermost concern that holds it; a plugin file outside any concern is its own.
        const home = (file) => folders.filter((folder) => inside(folder, file)).sort((a, b) => b.length - a.length)[0] ?? file
        return eachImport(context, (node, target) => {
          if (!isPluginFile(target) || inside(home(target), context.filename) || home(target) === context.filename || excepted(context, target)) return
          const specifiers = node.type === 'ExportAllDeclaration' || node.type === 'ImportExpression' ? undefined : node.specifiers
          const names = specifiers?.filter((specifier) => specifier.importKind !== 'type' && specifier.exportKind !== 'type')
            .map((specifier) => specifier.type === 'ImportSpecifier' ? specifier.imported.name ?? specifier.imported.value : specifier.type === 'ExportSpecifier' ? specifier.local.name ?? specifier.local.value : specifier.type === 'ImportDefaultSpecifier' ? 'default' : '*')
          const library = names === undefined ? ['*'] : names.filter((name) => name !== 'default' && (name === '*' || !exportsPlugin(target, name)))
          if (library.length > 0) {
            context.report({ node, messageId: 'library', data: { target: relative(import.meta.dirname, target).split(sep).join('/'), names: ` (not ${library.join(', ')})` } })
          }
        })
      }
    }
  }
}

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
    plugins: { 'import-x': importX, layout },
    settings: {
      // `./x.js` names the source `x.ts`, as TypeScript's NodeNext resolution reads it.
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js', '.json'], extensionAlias: { '.js': ['.ts', '.js'] } })]
    },
    rules: {
      'import-x/no-restricted-paths': ['error', { basePath: import.meta.dirname, zones: LAYERS }],
      // An import the rule above cannot read must not slip past it.
      'import-x/no-unresolved': ['error', { ignore: ['^[^.]'] }],
      // A concern's folder is private behind its entry; a plugin file is registered, not used as a library.
      'layout/concern-entry': 'error',
      'layout/plugin-not-library': 'error',
      // The formatter's width. What cannot be wrapped is let through: a URL, a regular expression, a template literal
      // (its line breaks are part of its text), and a line that is one string and nothing else but its key and a
      // `+`, `,` or `)`: a message or description is split only where that reads well.
      '@stylistic/max-len': ['error', {
        code: MAX_LINE_LENGTH,
        ignoreUrls: true,
        ignoreRegExpLiterals: true,
        ignoreTemplateLiterals: true,
        ignorePattern: LONE_STRING.source
      }],
      'no-restricted-syntax': ['error',
        { selector: 'ImportExpression[source.type!="Literal"]', message: 'import() of a computed specifier: its layer cannot be checked.' },
        { selector: 'TSImportType', message: 'Use `import type` at the top: an import() type escapes the layer check.' }
      ]
    }
  }
]
