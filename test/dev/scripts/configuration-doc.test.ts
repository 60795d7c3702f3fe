import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Type } from '@sinclair/typebox'
import { CONFIGURATION_DOC_FILE, ENV_EXAMPLE_FILE, OPENTELEMETRY_SETTINGS, SECTIONS, outOfDate, renderConfigurationDoc, renderEnvExample } from '../../../dev/scripts/generate-config-docs.js'
import { projectRoot } from '../../../lib/project-root.js'
import { ConfigError, SettingsSchema, loadConfig } from '../../../settings.js'
import { COMPLETE_PRODUCTION } from '../../helpers/made.js'

const checkedIn = readFileSync(join(projectRoot, CONFIGURATION_DOC_FILE), 'utf8')
const names = Object.keys(SettingsSchema.properties)

/** The table row of a setting on a page. */
function rowOf (page: string, name: string): string | undefined {
  return page.split('\n').find((line) => line.startsWith(`| \`${name}\` |`))
}

t.test('the checked-in docs/configuration.md is what schemas/config.ts generates', async (t) => {
  t.equal(checkedIn, renderConfigurationDoc(), `${CONFIGURATION_DOC_FILE} is up to date (npm run docs:generate)`)
  t.notOk(outOfDate(), 'the generator\'s --check agrees')
  t.notMatch(checkedIn, /\bseed\b/i, 'the page says specification')
})

t.test('every setting of the schema has one row, with its description, on one line', async (t) => {
  const rows = checkedIn.split('\n').filter((line) => /^\| `[A-Z0-9_]+` \|/.test(line))
  t.equal(rows.length, names.length + OPENTELEMETRY_SETTINGS.length, 'one row per setting, and no other')
  for (const name of names) {
    const { description } = SettingsSchema.properties[name]!
    t.ok(description, `${name} has a description in the schema`)
    const row = rowOf(checkedIn, name)
    t.ok(row?.includes(`| ${String(description).replace(/\|/g, '\\|')} |`), `${name}: its row carries its description`)
    t.equal(row?.split(/(?<!\\)\|/).length, 6, `${name}: four cells`)
  }
})

t.test('the OpenTelemetry settings, which its SDK reads, have a section of their own', async (t) => {
  const section = checkedIn.slice(checkedIn.indexOf('## OpenTelemetry (read by its SDK)'))
  for (const name of ['OTEL_SDK_DISABLED', 'OTEL_SERVICE_NAME', 'OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_PROTOCOL', 'OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_TRACES_SAMPLER', 'OTEL_TRACES_SAMPLER_ARG', 'OTEL_RESOURCE_ATTRIBUTES']) {
    t.equal(rowOf(section, name)?.split(/(?<!\\)\|/).length, 5, `${name}: a row of three cells`)
  }
})

t.test('defaults and bounds come from the schema', async (t) => {
  t.match(rowOf(checkedIn, 'PORT'), '| `PORT` | `3000` | integer, 0 to 65535 |')
  t.match(rowOf(checkedIn, 'SHUTDOWN_DELAY_MS'), '| `5000` in production; `0` outside production | integer, 0 to 120000 ms |')
  t.match(rowOf(checkedIn, 'ORDERS_PENDING_WARNING_S'), '| `900` | integer, 1 to 604800 s |')
  t.match(rowOf(checkedIn, 'LOG_LEVEL'), '| `info` | `fatal`, `error`, `warn`, `info`, `debug`, `trace`, `silent` |')
  t.match(rowOf(checkedIn, 'CRM_EVENTS_ENABLED'), '| `false` | `true`, `false` |')
  t.match(rowOf(checkedIn, 'REDIS_KEY_PREFIX'), '| empty |')
  t.match(rowOf(checkedIn, 'CORS_ORIGIN'), '| unset | comma-separated origins |')
  t.match(rowOf(checkedIn, 'PUBLIC_ORIGIN'), '| unset | comma-separated origins |')
  t.match(rowOf(checkedIn, 'DATABASE_URL'), 'required in production; `postgres://postgres@127.0.0.1:5432/postgres` outside production')
  t.match(rowOf(checkedIn, 'BILLING_API_SECRET'), 'required in production; the sandbox outside production')
  t.match(rowOf(checkedIn, 'CRM_PRIVATE_KEY_PATH'), 'required in production (or `CRM_PRIVATE_KEY`)')
})

t.test('what the page says production requires is what loadConfig requires', async (t) => {
  const required = names.filter((name) => rowOf(checkedIn, name)?.includes('required in production'))
  const complete = COMPLETE_PRODUCTION
  t.same(required.filter((name) => name !== 'CRM_PRIVATE_KEY_PATH').sort(), Object.keys(complete).filter((name) => name !== 'NODE_ENV').sort(), 'the settings marked required')
  t.doesNotThrow(() => loadConfig(complete), 'production starts with them alone')
  // Either key satisfies the requirement, so both are left out to see it refused.
  const keys = ['CRM_PRIVATE_KEY', 'CRM_PRIVATE_KEY_PATH']
  for (const name of required) {
    const leftOut = keys.includes(name) ? keys : [name]
    const env = Object.fromEntries(Object.entries(complete).filter(([key]) => !leftOut.includes(key)))
    const error = (() => {
      try {
        loadConfig(env)
      } catch (error) {
        return error
      }
    })()
    t.ok(error instanceof ConfigError, `without ${name}: refused`)
    t.match(error, { setting: leftOut.join(' or '), message: /required in production/ }, `without ${name}: named as required in production`)
  }
})

t.test('a setting added to the schema changes the page, so the comparison notices', async (t) => {
  const schema = Type.Object({
    ...SettingsSchema.properties,
    EXAMPLE_TIMEOUT_MS: Type.Integer({ minimum: 1, maximum: 1000, default: 500, description: 'an added setting' })
  })
  const sections = SECTIONS.map((section) => section.title === 'Shutdown' ? { ...section, settings: [...section.settings, 'EXAMPLE_TIMEOUT_MS'] } : section)
  const rendered = renderConfigurationDoc(schema, sections)
  t.not(rendered, checkedIn, 'the page differs from the checked-in one')
  t.equal(rowOf(rendered, 'EXAMPLE_TIMEOUT_MS'), '| `EXAMPLE_TIMEOUT_MS` | `500` | integer, 1 to 1000 ms | an added setting |', 'with a row of its own')
  t.equal(rendered.replace(`${rowOf(rendered, 'EXAMPLE_TIMEOUT_MS')!}\n`, ''), checkedIn, 'and nothing else changes')
  t.throws(() => renderConfigurationDoc(schema), /EXAMPLE_TIMEOUT_MS has no section/, 'a setting no section names stops the generator')
})

t.test('the checked-in .env.example is what schemas/config.ts generates: every setting, the required ones to fill in', async (t) => {
  const example = readFileSync(join(projectRoot, ENV_EXAMPLE_FILE), 'utf8')
  t.equal(example, renderEnvExample(), `${ENV_EXAMPLE_FILE} is up to date (npm run docs:generate)`)
  const assignments = example.split('\n').filter((line) => /^#?[A-Z0-9_]+=/.test(line))
  t.same(assignments.map((line) => line.replace(/^#/, '').split('=')[0]).sort(), [...names].sort(), 'one line per setting')
  const required = Object.keys(COMPLETE_PRODUCTION).filter((name) => name !== 'NODE_ENV')
  t.same(assignments.filter((line) => /^[A-Z]/.test(line)).sort(), ['NODE_ENV=production', ...required.map((name) => `${name}=`)].sort(), 'the required ones to fill in, and NODE_ENV=production')
  t.ok(assignments.includes('#PORT=3000'), 'the others commented out at their default')
  const port = SettingsSchema.properties.PORT
  const changed = Type.Object({ ...SettingsSchema.properties, PORT: Type.Integer({ ...port, default: 8080 }) })
  t.not(renderEnvExample(changed), example, 'a changed default changes it, so the comparison notices')
})

t.test('a changed default or description changes the page', async (t) => {
  const port = SettingsSchema.properties.PORT
  const withDefault = Type.Object({ ...SettingsSchema.properties, PORT: Type.Integer({ ...port, default: 8080 }) })
  t.match(rowOf(renderConfigurationDoc(withDefault), 'PORT'), '| `8080` |')
  const withDescription = Type.Object({ ...SettingsSchema.properties, PORT: Type.Integer({ ...port, description: 'changed' }) })
  t.match(rowOf(renderConfigurationDoc(withDescription), 'PORT'), '| changed |')
})

t.test('the generator refuses what it cannot document', async (t) => {
  const undescribed = Type.Object({ ...SettingsSchema.properties, PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000 }) })
  t.throws(() => renderConfigurationDoc(undescribed), /PORT has no description/)
  const sections = [...SECTIONS, { title: 'Gone', settings: ['NO_SUCH_SETTING'] }]
  t.throws(() => renderConfigurationDoc(SettingsSchema, sections), /names NO_SUCH_SETTING, which the settings schema does not have/)
  const twice = [...SECTIONS, { title: 'Again', settings: ['PORT'] }]
  t.throws(() => renderConfigurationDoc(SettingsSchema, twice), /PORT is in more than one section/)
  const ratio = Type.Object({ ...SettingsSchema.properties, SAMPLE_RATIO: Type.Number({ description: 'a kind of value the page cannot describe yet' }) })
  t.throws(() => renderConfigurationDoc(ratio, [...SECTIONS, { title: 'Sampling', settings: ['SAMPLE_RATIO'] }]), /SAMPLE_RATIO: its kind of schema has no rendering/)
})
