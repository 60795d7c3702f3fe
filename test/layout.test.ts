import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join, posix, relative, sep } from 'node:path'
import dockerignoreModule from '@balena/dockerignore'
import { Add, Copy, DockerfileParser, type Instruction } from 'dockerfile-ast'
import { ESLint } from 'eslint'
import type { Root, RootContent } from 'mdast'
import { fromMarkdown } from 'mdast-util-from-markdown'
import { toString } from 'mdast-util-to-string'
import t from 'tap'
import ts from 'typescript'
import { projectRoot } from '../lib/project-root.js'

const root = projectRoot
// The page whose `## Layout` section draws the tree.
const LAYOUT_DOCUMENT = join(root, 'docs', 'development.md')

// The product: what the production build compiles and the image runs.
const ENTRY_FILES = ['app.ts', 'server.ts', 'settings.ts']
const PRODUCT_FOLDERS = ['plugins', 'routes', 'integrations', 'schemas', 'lib']
const HARNESS_FOLDERS = ['dev', 'test']

const MAX_LINES = 300

const toPosix = (path: string) => path.split(sep).join('/')
const firstSegment = (path: string) => path.split('/')[0]!

// ---------------------------------------------------------------------------------------------------------------
// 1. The production build holds the product only.

/** What is wrong with the project files a production build would compile (posix paths relative to the root). */
function buildListingProblems (files: string[]): string[] {
  const problems: string[] = []
  for (const file of files) {
    if (HARNESS_FOLDERS.includes(firstSegment(file))) {
      problems.push(`${file}: the harness (${firstSegment(file)}/) is compiled into the production build`)
    } else if (!ENTRY_FILES.includes(file) && !PRODUCT_FOLDERS.includes(firstSegment(file))) {
      problems.push(`${file}: not ${ENTRY_FILES.join(', ')} or under ${PRODUCT_FOLDERS.map((folder) => `${folder}/`).join(', ')}`)
    }
  }
  return problems
}

/** The project files (not node_modules) `tsc -p tsconfig.build.json` would compile. */
function productionBuildFiles (): string[] {
  const output = execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json', '--listFilesOnly'], {
    cwd: root,
    encoding: 'utf8'
  })
  return output.split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.split(/[\\/]/).includes('node_modules'))
    .map((line) => toPosix(relative(root, line)))
    .sort()
}

// The package is CommonJS (`module.exports = factory`) while its types declare an ES default export.
const dockerignore = dockerignoreModule as unknown as typeof dockerignoreModule.default

const RUNTIME_SOURCES = ['package.json', 'package-lock.json', 'migrations', 'public', 'docs/runbooks']
const BUILD_OUTPUT = '/app/dist'

function normalizeSource (source: string): string {
  const path = source.replace(/\/+$/, '').replace(/^\.\//, '')
  return path === '' ? '/' : path
}

/** What would bring more than the product into the image: the sources copied into the last stage. */
function runtimeStageProblems (text: string): string[] {
  const dockerfile = DockerfileParser.parse(text)
  const froms = dockerfile.getFROMs()
  const runtime = froms.at(-1)
  if (runtime === undefined) return ['the Dockerfile has no FROM']
  const lineOf = (instruction: Instruction) => instruction.getRange().start.line + 1
  const stageNames = froms.slice(0, -1).map((from) => from.getBuildStage()?.toLowerCase())
  const problems: string[] = []
  const base = runtime.getImageName()?.toLowerCase() ?? ''
  if (stageNames.includes(base) || /^\d+$/.test(base)) {
    problems.push(`line ${lineOf(runtime)}: the runtime stage is built FROM the earlier stage ${base}, so it holds everything that stage holds`)
  }
  const copies = dockerfile.getInstructions()
    .filter((instruction): instruction is Copy | Add => (instruction instanceof Copy || instruction instanceof Add) && lineOf(instruction) > lineOf(runtime))
  for (const copy of copies) {
    // A heredoc writes its own text, nothing of the context (dockerfile-ast lists an ADD's only as its words).
    if (copy instanceof Copy ? copy.getHeredocs().length > 0 : copy.getArguments()[0]?.getValue().startsWith('<<') === true) continue
    const json = copy.getJSONStrings()
    const words = json.length > 0 ? json.map((word) => word.getJSONValue()) : copy.getArguments().map((word) => word.getValue())
    const source = copy instanceof Copy ? copy.getFromFlag()?.getValue() ?? undefined : undefined
    for (const path of words.slice(0, -1).map(normalizeSource)) {
      const at = `line ${lineOf(copy)}: ${copy.getKeyword()}${source === undefined ? '' : ` --from=${source}`} ${path}`
      if (source === undefined) {
        if (!RUNTIME_SOURCES.includes(path)) problems.push(`${at}: only ${RUNTIME_SOURCES.join(', ')} may come from the build context`)
      } else if (!stageNames.includes(source.toLowerCase()) && !/^\d+$/.test(source)) {
        problems.push(`${at}: copies from ${source}, which is not a build stage of this Dockerfile`)
      } else if (path !== BUILD_OUTPUT) {
        problems.push(`${at}: only ${BUILD_OUTPUT} may come from the build stage`)
      }
    }
  }
  return problems
}

/** The files under `folders` that a .dockerignore lets into the build context, as Docker matches it. */
function dockerignoreProblems (text: string, files: string[], folders: string[]): string[] {
  const context = dockerignore().add(text)
  return files.filter((file) => folders.includes(firstSegment(file)) && !context.ignores(file)).map((file) => `${file} is in the build context`)
}

/** The files of the tree as git sees them: tracked, or new and not ignored. */
function treeFiles (projectRoot = root): string[] {
  return execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], { cwd: projectRoot, encoding: 'utf8' }).split('\n').filter((path) => path !== '')
}

t.test('the production build holds the product only', async (t) => {
  t.test('the checks find what they are meant to find', async (t) => {
    t.strictSame(buildListingProblems(['app.ts', 'lib/a.ts', 'dev/sandbox/index.ts', 'test/helpers/app.ts', 'tools.ts']).length, 3)
    t.strictSame(runtimeStageProblems([
      'FROM node:24 AS build',
      'COPY . .',
      'FROM node:24',
      'COPY package.json ./',
      'COPY --from=build /app/dist ./dist',
      'COPY dev/sandbox \\',
      '  ./sandbox',
      'COPY --from=build /app/node_modules ./node_modules',
      'COPY ["migrations", "./migrations"]',
      'COPY <<EOF /app/NOTE',
      'COPY dev/ is text of the heredoc, not an instruction',
      'EOF'
    ].join('\n')), [
      'line 6: COPY dev/sandbox: only package.json, package-lock.json, migrations, public, docs/runbooks may come from the build context',
      'line 8: COPY --from=build /app/node_modules: only /app/dist may come from the build stage'
    ])
    t.strictSame(runtimeStageProblems('FROM node:24 AS build\nFROM build AS runtime\n').length, 1, 'a runtime stage based on the build stage')
    const files = ['dev/sandbox/index.ts', 'dev/tools/runner.ts', 'test/app.test.ts', 'lib/deadline.ts']
    t.strictSame(dockerignoreProblems('node_modules\n/dev/\ntest/**\n!dev/sandbox\n', files, ['dev', 'test']), ['dev/sandbox/index.ts is in the build context'])
    t.strictSame(dockerignoreProblems('node_modules\n', files, ['dev']), ['dev/sandbox/index.ts is in the build context', 'dev/tools/runner.ts is in the build context'])
  })

  t.test('tsconfig.build.json compiles the entry files, plugins, routes, integrations, schemas and lib only', async (t) => {
    const files = productionBuildFiles()
    t.ok(files.includes('app.ts') && files.includes('server.ts'), `the listing holds the entry points (${files.length} files)`)
    t.strictSame(buildListingProblems(files), [], 'every compiled project file is product, none is under dev/ or test/')
  })

  t.test("the image's runtime stage copies no simulator", async (t) => {
    t.strictSame(runtimeStageProblems(readFileSync(join(root, 'Dockerfile'), 'utf8')), [],
      `the last stage copies only ${RUNTIME_SOURCES.join(', ')} and ${BUILD_OUTPUT} from the build stage`)
  })

  t.test('.dockerignore keeps dev and test out of the build context', async (t) => {
    const files = treeFiles()
    t.ok(files.filter((file) => HARNESS_FOLDERS.includes(firstSegment(file))).length > 50, 'the files of dev/ and test/ are read')
    t.strictSame(dockerignoreProblems(readFileSync(join(root, '.dockerignore'), 'utf8'), files, HARNESS_FOLDERS), [])
  })

  t.test(`no product file is over ${MAX_LINES} lines`, async (t) => {
    const files = productionBuildFiles()
    const long = files.map((file) => ({ file, lines: readFileSync(join(root, file), 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > MAX_LINES)
    t.ok(files.length > 50, `${files.length} files read`)
    t.strictSame(long, [], `a file that grows past ${MAX_LINES} lines holds more than one thing: split it where it has a seam`)
  })
})

// ---------------------------------------------------------------------------------------------------------------
// 2. Imports go one way: routes → plugins → integrations → lib. The rule is ESLint's (eslint.config.js, run by
// `npm run lint` over the tree); this proves that it refuses what it must, and lets through what it may.

// Each planted import is a default import unless it gives its own `source` (planted as `planted`).
interface Planted { file: string, imports: string, source?: string, typeOnly?: boolean }
const REFUSED: Array<Planted & { rule: string }> = [
  { file: 'lib/planted.ts', imports: '../plugins/app/redis-keys.js', rule: 'import-x/no-restricted-paths' },
  { file: 'lib/planted.ts', imports: '../schemas/error.js', rule: 'import-x/no-restricted-paths', typeOnly: true },
  { file: 'schemas/planted.ts', imports: '../integrations/upstream.js', rule: 'import-x/no-restricted-paths' },
  { file: 'integrations/planted.ts', imports: '../plugins/app/health.js', rule: 'import-x/no-restricted-paths' },
  { file: 'integrations/planted.ts', imports: '../schemas/error.js', rule: 'import-x/no-restricted-paths' },
  { file: 'plugins/app/planted.ts', imports: '../../routes/health.js', rule: 'import-x/no-restricted-paths' },
  { file: 'routes/planted.ts', imports: '../app.js', rule: 'import-x/no-restricted-paths' },
  { file: 'plugins/app/planted.ts', imports: '../../dev/sandbox/index.js', rule: 'import-x/no-restricted-paths' },
  { file: 'server.ts', imports: './test/helpers/app.js', rule: 'import-x/no-restricted-paths' },
  { file: 'lib/planted.ts', imports: './nowhere.js', rule: 'import-x/no-unresolved' },
  // A concern's folder is private behind its index.ts, a nested concern's too (decision 0130).
  { file: 'routes/planted.ts', imports: '../plugins/app/orders/store.js', rule: 'layout/concern-entry' },
  { file: 'plugins/app/platform-events/planted.ts', imports: '../orders/pending-orders.js', rule: 'layout/concern-entry' },
  { file: 'plugins/app/access/planted.ts', imports: './oidc/sign-in.js', rule: 'layout/concern-entry' },
  { file: 'app.ts', imports: './plugins/app/orders/routes.js', rule: 'layout/concern-entry' },
  // A plugin file gives the outside its plugin, never a library value, nor everything.
  { file: 'plugins/app/orders/planted.ts', imports: '../../external/redis.js', source: 'import { STARTUP_CONNECT_MS as planted }', rule: 'layout/plugin-not-library' },
  { file: 'routes/planted.ts', imports: '../plugins/app/upstreams/index.js', source: 'import { upstreamNamed as planted }', rule: 'layout/plugin-not-library' },
  { file: 'routes/planted.ts', imports: '../plugins/app/health.js', source: 'import * as planted', rule: 'layout/plugin-not-library' },
  { file: 'plugins/app/planted.ts', imports: '../external/redis.js', source: 'export { default as planted, STARTUP_CONNECT_MS }', rule: 'layout/plugin-not-library' }
]
const ALLOWED: Planted[] = [
  { file: 'lib/planted.ts', imports: './deadline.js', source: 'export *' },
  { file: 'schemas/planted.ts', imports: '../lib/deadline.js', source: 'export *' },
  { file: 'integrations/planted.ts', imports: '../lib/deadline.js', source: 'export *' },
  { file: 'plugins/app/planted.ts', imports: '../../integrations/upstream.js', source: 'export *' },
  { file: 'plugins/app/planted.ts', imports: '../../schemas/error.js', source: 'export *' },
  { file: 'routes/planted.ts', imports: '../plugins/app/health.js' },
  { file: 'server.ts', imports: './app.js', source: 'export *' },
  { file: 'dev/planted.ts', imports: '../plugins/app/health.js', source: 'export *' },
  { file: 'test/planted.ts', imports: '../dev/sandbox/index.js', source: 'export *' },
  // A concern's entry, and the plugins it gives; a type, which loads nothing; anything, from inside the folder.
  { file: 'routes/planted.ts', imports: '../plugins/app/orders/index.js' },
  { file: 'app.ts', imports: './plugins/app/orders/index.js', source: 'import { orderRoutes as planted }' },
  { file: 'app.ts', imports: './plugins/app/access/index.js', source: 'import { oidcRoutes as planted }' },
  { file: 'routes/planted.ts', imports: '../plugins/app/orders/store.js', source: 'import type { OrderStore as planted }' },
  { file: 'plugins/app/platform-events/planted.ts', imports: '../health.js', source: 'import type { Health as planted }' },
  { file: 'plugins/app/orders/planted.ts', imports: './provisioning-job.js', source: 'export *' },
  { file: 'plugins/app/access/oidc/planted.ts', imports: '../sessions.js', source: 'import { SESSION_COOKIE as planted }' },
  // An exception of eslint.config.js, which lets this one through from anywhere.
  { file: 'plugins/app/upstreams/planted.ts', imports: '../monitoring/levels.js', source: 'import { levelOf as planted }' }
]
const LAYER_RULES = ['import-x/no-restricted-paths', 'import-x/no-unresolved', 'no-restricted-syntax', 'layout/concern-entry', 'layout/plugin-not-library']

/** The layer rules' complaints about `source` as the file `file` of the tree. */
async function layerComplaints (eslint: ESLint, file: string, source: string): Promise<string[]> {
  const [result] = await eslint.lintText(source, { filePath: join(root, file) })
  return (result?.messages ?? []).filter((message) => LAYER_RULES.includes(message.ruleId ?? '')).map((message) => `${message.line}: ${message.ruleId}`)
}

/** A planted file's text: its import, and an export of what it imported so that nothing is unused. */
function plantedSource ({ imports, source, typeOnly }: Planted): string {
  const statement = source ?? `import ${typeOnly === true ? 'type ' : ''}planted`
  if (statement.startsWith('export')) return `${statement} from '${imports}'\n`
  return `${statement} from '${imports}'\nexport ${statement.startsWith('import type') ? 'type ' : ''}{ planted }\n`
}

t.test('the lint rule refuses an import against the layers', async (t) => {
  const eslint = new ESLint({ cwd: root })
  for (const planted of REFUSED) {
    t.strictSame(await layerComplaints(eslint, planted.file, plantedSource(planted)), [`1: ${planted.rule}`], `${planted.file} → ${planted.imports}`)
  }
  for (const planted of ALLOWED) {
    t.strictSame(await layerComplaints(eslint, planted.file, plantedSource(planted)), [], `${planted.file} → ${planted.imports} is allowed`)
  }
  const escapes = "type App = typeof import('../app.js')\nexport const load = async (name: string): Promise<App> => await import(name)\n"
  t.strictSame(await layerComplaints(eslint, 'lib/planted.ts', escapes), ['1: no-restricted-syntax', '2: no-restricted-syntax'],
    'an import() type and an import() of a computed specifier, which no layer check can read, are refused')
})

t.test("the layout rules' exceptions name files of the tree, each with its reason", async (t) => {
  // Read at run time: the lint configuration is JavaScript, outside the type-checked tree.
  const { LAYOUT_EXCEPTIONS } = await import(join(root, 'eslint.config.js')) as { LAYOUT_EXCEPTIONS: Array<{ from?: string, to: string[], reason: string }> }
  t.ok(LAYOUT_EXCEPTIONS.length <= 5, `${LAYOUT_EXCEPTIONS.length} exceptions: few`)
  const missing = LAYOUT_EXCEPTIONS.flatMap(({ from, to }) => [...(from === undefined ? [] : [from]), ...to]).filter((file) => !existsSync(join(root, file)))
  t.strictSame(missing, [], 'an exception of a file moved or gone goes with it')
  t.ok(LAYOUT_EXCEPTIONS.every(({ reason }) => reason.length > 20), 'each says why')
})

// ---------------------------------------------------------------------------------------------------------------
// 3. The layout section of docs/development.md matches the tree.

// The top-level names of the design card, which name project paths even without a slash or an extension.
const TOP_LEVEL_NAMES = new Set([
  'package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'tsconfig.dev.json', 'app.ts', 'server.ts', 'settings.ts',
  'plugins', 'routes', 'integrations', 'schemas', 'lib', 'test', 'dev', 'Dockerfile', '.dockerignore', 'migrations',
  'public', 'deploy', 'docs', 'README.md', 'BENCHMARKS.md', 'dist', 'dist-dev', 'eslint.config.js', '.c8rc.json'
])
const KNOWN_EXTENSION = /\.(?:ts|mts|cts|js|mjs|cjs|json|md|yml|yaml|sql|html|css|sh)$/
const MEDIA_TYPE = /^(?:application|text|image|audio|video|multipart|font)\//

function looksLikeProjectPath (text: string): boolean {
  if (text === '' || /[\s*<>{}()[\]=:,;?$'"`|]/.test(text) || /^[/@~#!+-]/.test(text) || MEDIA_TYPE.test(text)) return false
  const path = text.replace(/^\.\//, '')
  return path.includes('/') || KNOWN_EXTENSION.test(path) || TOP_LEVEL_NAMES.has(path.replace(/\/$/, ''))
}

interface Mention { path: string, line: number, alternative?: string }

/** The nodes of a document's `## Layout` section, up to the next heading of its level; undefined without one. */
function layoutSection (document: Root): RootContent[] | undefined {
  const nodes = document.children
  const start = nodes.findIndex((node) => node.type === 'heading' && node.depth === 2 && toString(node).trim() === 'Layout')
  if (start < 0) return undefined
  const end = nodes.findIndex((node, index) => index > start && node.type === 'heading' && node.depth <= 2)
  return nodes.slice(start + 1, end < 0 ? undefined : end)
}

/**
 * The project paths a tree drawn as text names: the first word of each line, nested under the folder above
 * it when indented. `firstLine` is the document's line of the tree's first line.
 */
function treeMentions (tree: string, firstLine: number): Mention[] {
  const mentions: Mention[] = []
  let folders: Array<{ indent: number, path: string }> = []
  tree.split('\n').forEach((text, index) => {
    const drawn = text.replace(/[│├└─┬┼┃┣┗━]/g, ' ').replace(/^[\s|+\\-]*(?=\S)/, (prefix) => ' '.repeat(prefix.length))
    const indent = drawn.search(/\S/)
    if (indent < 0) return
    const word = drawn.slice(indent).split(/\s+/)[0]!
    if (!looksLikeProjectPath(word)) return
    while (folders.length > 0 && folders.at(-1)!.indent >= indent) folders.pop()
    const parent = folders.at(-1)?.path
    const own = word.replace(/^\.\//, '')
    mentions.push({ path: parent === undefined ? own : posix.join(parent, own), line: firstLine + index, ...(parent === undefined ? {} : { alternative: own }) })
    if (own.endsWith('/')) folders = [...folders, { indent, path: posix.join(parent ?? '', own) }]
  })
  return mentions
}

/** The project paths a `## Layout` section names: every inline code span that looks like a path, and each tree drawn in a code block. */
function layoutMentions (section: RootContent[]): Mention[] {
  const visit = (node: RootContent): Mention[] => {
    const line = node.position?.start.line ?? 0
    if (node.type === 'inlineCode') {
      const path = node.value.trim()
      return looksLikeProjectPath(path) ? [{ path: path.replace(/^\.\//, ''), line }] : []
    }
    // A fenced block starts a line before its text (its fence) and spans more lines than its text; an indented one does not.
    if (node.type === 'code') {
      const fenced = (node.position?.end.line ?? line) - line >= node.value.split('\n').length
      return treeMentions(node.value, fenced ? line + 1 : line)
    }
    return 'children' in node ? node.children.flatMap(visit) : []
  }
  return section.flatMap(visit)
}

/** Which of `paths` git ignores (build outputs, logs): generated, never checked in. */
function gitIgnored (projectRoot: string, paths: string[]): Set<string> {
  // Exit status 1 when none is ignored: not a failure.
  const run = spawnSync('git', ['check-ignore', '--no-index', '--stdin'], { cwd: projectRoot, input: paths.join('\n'), encoding: 'utf8' })
  return new Set(run.stdout.split('\n').filter((path) => path !== ''))
}

function exists (projectRoot: string, path: string): boolean {
  const full = join(projectRoot, path)
  if (!existsSync(full)) return false
  return !path.endsWith('/') || statSync(full).isDirectory()
}

/** What in the `## Layout` section of `documentPath` names no path of the tree at `projectRoot`. */
function layoutProblems (documentPath: string, projectRoot: string): { mentions: Mention[], problems: string[] } {
  const section = layoutSection(fromMarkdown(readFileSync(documentPath, 'utf8')))
  if (section === undefined) return { mentions: [], problems: [`${documentPath} has no "## Layout" section`] }
  const mentions = layoutMentions(section)
  if (mentions.length === 0) return { mentions, problems: [`the "## Layout" section of ${documentPath} names no project path`] }
  const name = basename(documentPath)
  const generated = gitIgnored(projectRoot, mentions.map((mention) => mention.path))
  let fileNames: Set<string> | undefined
  const problems: string[] = []
  for (const mention of mentions) {
    const path = mention.path
    if (generated.has(path)) continue
    if (exists(projectRoot, path)) continue
    if (mention.alternative !== undefined && exists(projectRoot, mention.alternative)) continue
    if (!path.replace(/\/$/, '').includes('/')) {
      fileNames ??= new Set(treeFiles(projectRoot).map((file) => basename(file)))
      if (fileNames.has(path)) continue
    }
    problems.push(`${name} line ${mention.line}: \`${path}\` does not exist${path.endsWith('/') ? ' (as a folder)' : ''}`)
  }
  return { mentions, problems }
}

t.test('the layout section of docs/development.md matches the tree', async (t) => {
  t.test('the checker finds a missing section and paths that do not exist', async (t) => {
    const folder = mkdtempSync(join(tmpdir(), 'layout-test-'))
    t.teardown(() => rmSync(folder, { recursive: true, force: true }))
    // A copy of the page without its Layout section, then with a small one of our own.
    const page = readFileSync(LAYOUT_DOCUMENT, 'utf8')
      .replace(/^## Layout\s*\n[\s\S]*?(?=^## )/m, '')
    const copy = join(folder, 'development.md')
    writeFileSync(copy, page)
    t.strictSame(layoutProblems(copy, root).problems, [`${copy} has no "## Layout" section`])

    const section = [
      '## Layout',
      '',
      '`app.ts` builds the app, `server.ts` runs it (`dist/server.js` once built), reading `schemas/config.ts`.',
      'Not paths: `GET /health/live`, `npm run build`, `application/json`, `@fastify/postgres`, `/app/logs`.',
      'Gone: `sandbox/`, `lib/nope.ts`.',
      '',
      '    lib/indented.ts   a tree in an indented block',
      '',
      '```',
      'dev/',
      '├── sandbox/        upstream simulators; see sandbox/README.md',
      '│   └── README.md',
      '├── tools/',
      '│   └── test-reporter.ts',
      '└── nowhere/',
      'routes/             route plugins; routes/api/ is the',
      '                    portal API',
      '```',
      ''
    ].join('\n')
    writeFileSync(copy, page.replace(/^## /m, `${section}\n## `))
    const { mentions, problems } = layoutProblems(copy, root)
    const line = (text: string) => readFileSync(copy, 'utf8').split('\n').indexOf(text) + 1
    t.strictSame(mentions.map((mention) => mention.path), [
      'app.ts', 'server.ts', 'dist/server.js', 'schemas/config.ts', 'sandbox/', 'lib/nope.ts', 'lib/indented.ts',
      'dev/', 'dev/sandbox/', 'dev/sandbox/README.md', 'dev/tools/', 'dev/tools/test-reporter.ts', 'dev/nowhere/', 'routes/'
    ])
    t.strictSame(problems, [
      `development.md line ${line('Gone: `sandbox/`, `lib/nope.ts`.')}: \`sandbox/\` does not exist (as a folder)`,
      `development.md line ${line('Gone: `sandbox/`, `lib/nope.ts`.')}: \`lib/nope.ts\` does not exist`,
      `development.md line ${line('    lib/indented.ts   a tree in an indented block')}: \`lib/indented.ts\` does not exist`,
      `development.md line ${line('└── nowhere/')}: \`dev/nowhere/\` does not exist (as a folder)`
    ])
  })

  t.test('every path docs/development.md names under "## Layout" exists', async (t) => {
    const { mentions, problems } = layoutProblems(LAYOUT_DOCUMENT, root)
    t.strictSame(problems, [], `the ${mentions.length} paths the section names exist`)
  })
})

// ---------------------------------------------------------------------------------------------------------------
// 4. A plugin body only wires (create, decorate, register hooks, close in onClose): what a plugin does lives in
// named classes and functions beside it, so the function it passes to fastify-plugin stays short.

const MAX_PLUGIN_BODY_LINES = 60

interface PluginBody { line: number, name: string, lines: number | undefined }

/**
 * The functions a source passes to fastify-plugin (`fp(body, …)`), inline or named, each with the line it starts on
 * and the lines it spans; `lines` is undefined when the argument is no function declared in the file.
 */
function pluginBodies (source: string, file = 'plugin.ts'): PluginBody[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true)
  const lineOf = (position: number) => tree.getLineAndCharacterOfPosition(position).line + 1
  const span = (node: ts.Node) => lineOf(node.getEnd()) - lineOf(node.getStart(tree)) + 1
  const isFunction = (node: ts.Node | undefined): node is ts.FunctionLikeDeclaration =>
    node !== undefined && (ts.isFunctionDeclaration(node) || ts.isFunctionExpression(node) || ts.isArrowFunction(node))
  // The names fastify-plugin is imported as, and the functions declared at the top of the file.
  const plugin = new Set<string>()
  const declared = new Map<string, ts.FunctionLikeDeclaration>()
  for (const statement of tree.statements) {
    if (ts.isImportDeclaration(statement) && ts.isStringLiteral(statement.moduleSpecifier) && statement.moduleSpecifier.text === 'fastify-plugin') {
      const name = statement.importClause?.name?.text
      if (name !== undefined) plugin.add(name)
    } else if (ts.isFunctionDeclaration(statement) && statement.name !== undefined) {
      declared.set(statement.name.text, statement)
    } else if (ts.isVariableStatement(statement)) {
      for (const { name, initializer } of statement.declarationList.declarations) {
        if (ts.isIdentifier(name) && isFunction(initializer)) declared.set(name.text, initializer)
      }
    }
  }
  const bodies: PluginBody[] = []
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && plugin.has(node.expression.text) && node.arguments[0] !== undefined) {
      const argument = node.arguments[0]
      const body = ts.isIdentifier(argument) ? declared.get(argument.text) : argument
      const name = ts.isIdentifier(argument) ? argument.text : isFunction(argument) ? argument.name?.getText(tree) ?? '(inline)' : argument.getText(tree)
      bodies.push(isFunction(body) ? { line: lineOf(body.getStart(tree)), name, lines: span(body) } : { line: lineOf(argument.getStart(tree)), name, lines: undefined })
    }
    ts.forEachChild(node, visit)
  }
  visit(tree)
  return bodies
}

/** The plugin bodies of `source` longer than the limit, or that the check cannot measure. */
function pluginBodyProblems (file: string, source: string): string[] {
  return pluginBodies(source, file).flatMap(({ line, name, lines }) => {
    if (lines === undefined) return [`${file}:${line}: fp(${name}): not a function declared in the file, so its length is unknown`]
    if (lines > MAX_PLUGIN_BODY_LINES) return [`${file}:${line}: the plugin body ${name} spans ${lines} lines (at most ${MAX_PLUGIN_BODY_LINES})`]
    return []
  })
}

function typeScriptFilesUnder (folder: string): string[] {
  return readdirSync(join(root, folder), { recursive: true, encoding: 'utf8' })
    .map(toPosix)
    .filter((path) => path.endsWith('.ts') && !path.endsWith('.d.ts'))
    .map((path) => posix.join(folder, path))
    .sort()
}

t.test(`no plugin body is over ${MAX_PLUGIN_BODY_LINES} lines`, async (t) => {
  t.test('the measure finds a long body, inline or declared, and one it cannot measure', async (t) => {
    const lines = (count: number) => Array.from({ length: count - 2 }, (_, index) => `  fastify.decorate('part${index}', ${index})`).join('\n')
    const planted = [
      "import plugin from 'fastify-plugin'",
      'const short = async (fastify) => {',
      lines(MAX_PLUGIN_BODY_LINES),
      '}',
      '/** Its comment is not counted. */',
      'async function long (fastify) {',
      '  const long = 1',
      lines(MAX_PLUGIN_BODY_LINES),
      '}',
      'export const a = plugin(short, { name: \'short\' })',
      'export const b = plugin(long, { name: \'long\' })',
      'export const c = plugin(async function inline (fastify) {',
      lines(MAX_PLUGIN_BODY_LINES + 1),
      '}, { name: \'inline\' })',
      'export const d = plugin(imported, { name: \'imported\' })',
      'export const e = fp(long)'
    ].join('\n')
    const line = (text: string) => planted.split('\n').findIndex((each) => each.startsWith(text)) + 1
    t.strictSame(pluginBodies(planted).map(({ name, lines }) => ({ name, lines })), [
      { name: 'short', lines: MAX_PLUGIN_BODY_LINES },
      { name: 'long', lines: MAX_PLUGIN_BODY_LINES + 1 },
      { name: 'inline', lines: MAX_PLUGIN_BODY_LINES + 1 },
      { name: 'imported', lines: undefined }
    ], 'fp is found under the name it is imported as; a name is the function declared at the top of the file, not a variable within it')
    t.strictSame(pluginBodyProblems('planted.ts', planted), [
      `planted.ts:${line('async function long')}: the plugin body long spans ${MAX_PLUGIN_BODY_LINES + 1} lines (at most ${MAX_PLUGIN_BODY_LINES})`,
      `planted.ts:${line('export const c')}: the plugin body inline spans ${MAX_PLUGIN_BODY_LINES + 1} lines (at most ${MAX_PLUGIN_BODY_LINES})`,
      `planted.ts:${line('export const d')}: fp(imported): not a function declared in the file, so its length is unknown`
    ])
  })

  t.test('every function passed to fastify-plugin under plugins/ is short', async (t) => {
    const files = typeScriptFilesUnder('plugins')
    const sources = files.map((file) => ({ file, source: readFileSync(join(root, file), 'utf8') }))
    const measured = sources.flatMap(({ file, source }) => pluginBodies(source, file))
    t.ok(measured.length > 20, `${measured.length} plugin bodies in ${files.length} files`)
    t.strictSame(sources.flatMap(({ file, source }) => pluginBodyProblems(file, source)), [],
      'a plugin body that grows holds what the plugin does: move it into a named class or function beside it, so the body only wires')
  })
})
