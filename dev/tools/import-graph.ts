import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, posix } from 'node:path'
import ts from 'typescript'

/** How a module names another one. */
export type ImportKind =
  | 'import' // import … from '…', import '…', import type … from '…'
  | 'export' // export … from '…', export type … from '…'
  | 'dynamic' // import('…')
  | 'type' // typeof import('…') and other import types
  | 'require' // require('…'), import x = require('…')
  | 'reference' // /// <reference path="…" />

export interface ImportReference {
  kind: ImportKind
  /** The specifier as written; undefined for a dynamic import whose argument is computed. */
  specifier: string | undefined
  /** The source text of a computed dynamic import's argument. */
  expression?: string
  /** 1-based line of the reference. */
  line: number
}

export interface ResolvedImport extends ImportReference {
  /**
   * The repository path (posix, relative to the root) a relative specifier designates, `.js` mapped to `.ts`
   * like TypeScript's NodeNext resolution; undefined for packages, builtins and computed specifiers.
   */
  target: string | undefined
}

function literalText (node: ts.Node | undefined): string | undefined {
  if (node !== undefined && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node))) return node.text
  return undefined
}

/** Every module reference of a TypeScript source: static imports and re-exports, import(), import types, require(). */
export function readImportSpecifiers (source: string, fileName = 'module.ts'): ImportReference[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)
  const references: ImportReference[] = []
  const lineOf = (position: number) => file.getLineAndCharacterOfPosition(position).line + 1
  const add = (kind: ImportKind, node: ts.Node, specifier: string | undefined, expression?: string) => {
    references.push({ kind, specifier, ...(expression === undefined ? {} : { expression }), line: lineOf(node.getStart(file)) })
  }

  for (const reference of file.referencedFiles) {
    references.push({ kind: 'reference', specifier: reference.fileName, line: lineOf(reference.pos) })
  }

  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      add('import', node, literalText(node.moduleSpecifier))
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined) {
      add('export', node, literalText(node.moduleSpecifier))
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add('require', node, literalText(node.moduleReference.expression))
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add('type', node, literalText(node.argument.literal))
    } else if (ts.isCallExpression(node)) {
      const [argument] = node.arguments
      if (node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const specifier = literalText(argument)
        add('dynamic', node, specifier, specifier === undefined ? argument?.getText(file) ?? '' : undefined)
      } else if (ts.isIdentifier(node.expression) && node.expression.text === 'require' && literalText(argument) !== undefined) {
        add('require', node, literalText(argument))
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(file)
  return references
}

const SOURCE_OF_OUTPUT: Record<string, string> = { '.js': '.ts', '.mjs': '.mts', '.cjs': '.cts', '.jsx': '.tsx' }

export function isRelative (specifier: string): boolean {
  return specifier === '.' || specifier === '..' || specifier.startsWith('./') || specifier.startsWith('../')
}

/**
 * The repository path a relative specifier of `fromFile` (posix, relative to the root) designates: `./x.js` is
 * the source `x.ts` beside it. With `exists`, an output specifier whose source does not exist but which names an
 * existing file (a real `.js`) resolves to that file, and an extensionless one tries `.ts` and `/index.ts`.
 * Undefined for a bare (package or builtin) specifier.
 */
export function resolveSpecifier (fromFile: string, specifier: string, exists?: (path: string) => boolean): string | undefined {
  if (!isRelative(specifier)) return undefined
  const path = posix.normalize(posix.join(posix.dirname(fromFile), specifier.split('?')[0]!))
  const extension = posix.extname(path)
  const source = SOURCE_OF_OUTPUT[extension]
  if (source !== undefined) {
    const sourcePath = path.slice(0, -extension.length) + source
    if (exists === undefined || exists(sourcePath) || !exists(path)) return sourcePath
    return path
  }
  if (extension === '' && exists !== undefined && !exists(path)) {
    for (const candidate of [`${path}.ts`, `${path}/index.ts`]) {
      if (exists(candidate)) return candidate
    }
  }
  return path
}

/** The references of a source with the repository path of each relative one. */
export function importsOf (file: string, source: string, exists?: (path: string) => boolean): ResolvedImport[] {
  return readImportSpecifiers(source, file).map((reference) => ({
    ...reference,
    target: reference.specifier === undefined ? undefined : resolveSpecifier(file, reference.specifier, exists)
  }))
}

const TYPESCRIPT = /\.(?:c|m)?tsx?$/

/** The TypeScript files (posix paths relative to `root`) among `entries`, which are files or folders walked recursively. */
export function listTypeScriptFiles (root: string, entries: string[]): string[] {
  const files: string[] = []
  const walk = (path: string) => {
    for (const entry of readdirSync(join(root, path), { withFileTypes: true })) {
      const child = posix.join(path, entry.name)
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules') walk(child)
      } else if (TYPESCRIPT.test(entry.name)) {
        files.push(child)
      }
    }
  }
  for (const entry of entries) {
    const path = join(root, entry)
    if (!existsSync(path)) continue
    if (statSync(path).isDirectory()) walk(entry)
    else if (TYPESCRIPT.test(entry)) files.push(entry)
  }
  return files.sort()
}

/** The import graph of `files` (paths relative to `root`): each file with its resolved references. */
export function importGraph (root: string, files: string[]): Map<string, ResolvedImport[]> {
  const exists = (path: string) => existsSync(join(root, path))
  return new Map(files.map((file) => [file, importsOf(file, readFileSync(join(root, file), 'utf8'), exists)]))
}
