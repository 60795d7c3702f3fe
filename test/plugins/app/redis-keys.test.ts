import t from 'tap'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { projectRoot } from '../../../lib/project-root.js'
import * as redisKeys from '../../../plugins/app/redis-keys.js'

const KEYS_MODULE = 'plugins/app/redis-keys.ts'
// A template that puts a word and a colon after a prefix, or the key prefix setting itself, makes a key.
const MAKES_A_KEY = /\$\{[^}]*(?:prefix|Prefix|PREFIX)[^}]*\}[a-z][a-z-]*:|REDIS_KEY_PREFIX\}/

t.test('every Redis key of the product is made in plugins/app/redis-keys.ts', async (t) => {
  /* eslint-disable no-template-curly-in-string -- source text, for the check to read */
  t.ok(MAKES_A_KEY.test('`${this.options.prefix}session:${id}`') && MAKES_A_KEY.test('`${REDIS_KEY_PREFIX}bull`'), 'the check finds a key made elsewhere')
  t.notOk(MAKES_A_KEY.test('`${this.prefix}${kind}:${key}`'), 'a key under a prefix given by the caller is not one')
  /* eslint-enable no-template-curly-in-string */
  const product = execFileSync('git', ['ls-files', '*.ts'], { cwd: projectRoot, encoding: 'utf8' }).split('\n')
    .filter((path) => /^(app|server)\.ts$|^(plugins|routes|integrations|schemas|lib)\//.test(path) && path !== KEYS_MODULE)
  t.ok(product.length > 50, `${product.length} product files read`)
  const found = product.flatMap((path) => readFileSync(join(projectRoot, path), 'utf8').split('\n')
    .flatMap((line, index) => MAKES_A_KEY.test(line) ? [`${path}:${index + 1}: ${line.trim()}`] : []))
  t.strictSame(found, [])
})

t.test('no key lies in the namespace of another', async (t) => {
  const keys = Object.entries(redisKeys).flatMap(([name, make]): Array<[string, string]> => {
    const made: unknown = make('p:', 7 as never)
    return typeof made === 'string' ? [[name, made]] : Object.entries(made as Record<string, string>).map(([part, key]) => [`${name}.${part}`, key])
  })
  t.ok(keys.length >= 15, `${keys.length} keys and prefixes`)
  for (const [name, key] of keys) {
    t.ok(key.startsWith('p:'), `${name} is under REDIS_KEY_PREFIX`)
    const inside = keys.filter(([other, otherKey]) => other !== name && otherKey.startsWith(key) && (key.endsWith(':') || otherKey[key.length] === ':'))
    t.strictSame(inside, [], `${name} (${key}) holds no other's keys`)
  }
})
