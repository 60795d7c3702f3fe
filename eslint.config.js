import neostandard from 'neostandard'

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'dist-dev/**', 'coverage/**', '.tap/**', 'logs/**'] }),
  {
    rules: {
      // TypeBox's idiom gives a schema and its Static type the same name.
      '@typescript-eslint/no-redeclare': 'off'
    }
  }
]
