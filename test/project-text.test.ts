import t from 'tap'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot } from '../lib/project-root.js'
import { buildTestApp } from './helpers/app.js'

// The project speaks of the product: the specification is "the specification", and no file tells
// the story of how the project was built (that is git's).

const SEED = /\bseed(s|ed)?\b/i
const HISTORY = [
  /\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(st|nd|rd|th)) (session|iteration)\b/i,
  /\b(earlier|previous|last) (session|iteration)s?\b/i,
  /^#+ .*\b(run|session|iteration) #?\d+\b/im,
  /\blast time\b/i
]

// This file names the words it looks for; the lock file holds package names.
const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: projectRoot, encoding: 'utf8' }).split('\0')
  .filter((path) => path !== '' && path !== 'package-lock.json' && path !== 'test/project-text.test.ts' && !/\.(png|jpg|ico|woff2?)$/.test(path))

const matches = (paths: string[], pattern: RegExp) => paths.flatMap((path) => {
  let text: string
  try {
    text = readFileSync(join(projectRoot, path), 'utf8')
  } catch {
    return [] // listed by git but not in the work tree (a deletion not yet committed)
  }
  return text.split('\n').flatMap((line, index) => pattern.test(line) ? [`${path}:${index + 1}: ${line.trim().slice(0, 120)}`] : [])
})

t.test('no file says "seed": the user\'s text is the specification', async (t) => {
  t.ok(tracked.length > 100, `${tracked.length} tracked files read`)
  t.same(matches(tracked, SEED), [])
})

t.test('no document tells how the project was developed', async (t) => {
  const documents = tracked.filter((path) => path.endsWith('.md'))
  t.ok(documents.includes('README.md') && documents.includes('BENCHMARKS.md'))
  for (const pattern of HISTORY) t.same(matches(documents, pattern), [], String(pattern))
})

t.test('the checks find what they are meant to find', async (t) => {
  t.ok(SEED.test('as the Seed says'), 'the word')
  t.notOk(SEED.test('seedless'), 'not inside another word')
  t.ok(HISTORY.some((pattern) => pattern.test('In the third session we moved it')))
  t.ok(HISTORY.some((pattern) => pattern.test('## Run 3: the queue')))
  t.notOk(HISTORY.some((pattern) => pattern.test('a database kept from an earlier run')), 'a run of the program is not history')
})

t.test('what the running service says (API document, metric help, status page) never says "seed"', async (t) => {
  const app = await buildTestApp(t)
  for (const url of ['/docs/json', '/metrics', '/status', '/health/alerts', '/health/queues']) {
    const response = await app.inject(url)
    t.equal(response.statusCode, 200, url)
    t.notMatch(response.body, SEED, `${url} says specification`)
  }
})
