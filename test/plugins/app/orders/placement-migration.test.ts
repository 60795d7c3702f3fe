import { join } from 'node:path'
import pg from 'pg'
import Postgrator from 'postgrator'
import t from 'tap'
import { migrate } from '../../../../plugins/app/database/migrations.js'
import { projectRoot } from '../../../../lib/project-root.js'
import { ensureTestDatabase, testSchemaUrl } from '../../../helpers/app.js'

t.test('orders placed before placement steps were recorded: linked ones placed, failed ones to be cancelled, the others to be linked or cancelled', async (t) => {
  await ensureTestDatabase()
  const url = await testSchemaUrl(t)
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  const { rows: [session] } = await client.query<{ schema: string }>('SELECT current_schema() AS schema')
  // The schema as it was before placement steps were recorded.
  await new Postgrator({
    currentSchema: session!.schema,
    migrationPattern: join(projectRoot, 'migrations', '*.sql'),
    driver: 'pg',
    schemaTable: 'schema_version',
    execQuery: (query) => client.query(query)
  }).migrate('004')
  await client.query(`INSERT INTO orders (billing_client_id, product_id, billing_cycle, billing_order_id, crm_order_id, status) VALUES
    (1, '1', 'monthly', 11, '801000000000011AAA', 'Active'),
    (1, '1', 'monthly', 12, NULL, 'Failed'),
    (1, '1', 'monthly', 13, NULL, 'Pending Review'),
    (NULL, 'X', NULL, NULL, '801000000000014AAA', 'Pending Review')`)
  await migrate(url, { connectTimeoutMs: 5000, migrationTimeoutMs: 30_000 })
  const { rows } = await client.query<{ billing_order_id: number | null, placement: string | null }>('SELECT billing_order_id, placement FROM orders ORDER BY billing_order_id NULLS LAST')
  t.same(rows, [
    { billing_order_id: 11, placement: 'placed' },
    { billing_order_id: 12, placement: 'compensating' },
    { billing_order_id: 13, placement: 'crm' },
    { billing_order_id: null, placement: null }
  ])
})
