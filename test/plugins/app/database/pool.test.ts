import t from 'tap'
import { elidedStatement } from '../../../../plugins/app/database/pool.js'

t.test('a statement keeps its placeholders and loses its literals', async (t) => {
  t.equal(elidedStatement("SELECT * FROM orders WHERE id = $1 AND status = 'Active' LIMIT 10"), 'SELECT * FROM orders WHERE id = $1 AND status = ? LIMIT ?')
  t.equal(elidedStatement('UPDATE t1 SET a = $12, b = 3.5\n  WHERE c = $2'), 'UPDATE t1 SET a = $12, b = ? WHERE c = $2')
})
