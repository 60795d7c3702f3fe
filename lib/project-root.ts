import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

function findProjectRoot (from: string): string {
  let directory = from
  while (!existsSync(join(directory, 'package.json'))) {
    const parent = dirname(directory)
    if (parent === directory) throw new Error(`No package.json above ${from}`)
    directory = parent
  }
  return directory
}

/** The folder holding package.json, both when running from sources and from dist/. */
export const projectRoot = findProjectRoot(dirname(fileURLToPath(import.meta.url)))
