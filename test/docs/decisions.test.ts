import t from 'tap'
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { projectRoot } from '../../lib/project-root.js'

const FOLDER = join(projectRoot, 'docs', 'decisions')
const records = readdirSync(FOLDER).filter((name) => /^\d{4}-.+\.md$/.test(name)).sort()
const index = readFileSync(join(FOLDER, 'README.md'), 'utf8')
// Under the title: `Date: 2026-11-26`, or the bold form of the first dated records.
const DATE = /^(?:Date: (\d{4}-\d{2}-\d{2})|\*\*Date\.\*\* (\d{4}-\d{2}-\d{2})\.)$/m

t.test('every decision record is numbered, titled and dated', async (t) => {
  t.ok(records.length > 50, `${records.length} records`)
  for (const name of records) {
    const [title = '', ...rest] = readFileSync(join(FOLDER, name), 'utf8').split('\n')
    t.match(title, new RegExp(`^# ${name.slice(0, 4)}\\. \\S`), `${name}: its title carries its number`)
    const date = DATE.exec(rest.slice(0, 4).join('\n'))
    t.ok(date !== null, `${name}: a date under the title`)
  }
})

t.test('the index lists every record once, and nothing else', async (t) => {
  const listed = [...index.matchAll(/^- \[(\d{4})\. [^\]]+\]\(([^)]+)\)/gm)].map(([, number, file]) => ({ number, file }))
  t.strictSame(listed.map(({ file }) => file), records, 'in number order')
  for (const { number, file } of listed) t.equal(file?.slice(0, 4), number, `${file} is listed under its own number`)
})

t.test('every link to a decision record from the documentation finds it', async (t) => {
  const documents = execFileSync('git', ['ls-files', '*.md'], { cwd: projectRoot, encoding: 'utf8' }).split('\n').filter((path) => path !== '')
  const links = documents.flatMap((path) => [...readFileSync(join(projectRoot, path), 'utf8').matchAll(/\]\(((?:[^)#]*\/)?\d{4}-[^)#]+\.md)/g)]
    .map(([, link = '']) => ({ path, link }))
    .filter(({ link }) => path.startsWith('docs/decisions/') || link.includes('decisions/')))
  t.ok(links.length > 10, `${links.length} links read`)
  t.strictSame(links.filter(({ path, link }) => !existsSync(join(projectRoot, dirname(path), link))).map(({ path, link }) => `${path}: ${link}`), [])
})
