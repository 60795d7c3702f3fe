import { runtimeRefusal } from './runtime.js'

// Imported first by the production entry: modules evaluate in import order, so an older runtime is
// refused here with one line, before any other module's code runs.
const refusal = runtimeRefusal()
if (refusal !== undefined) {
  process.stderr.write(`${refusal}\n`)
  process.exit(1)
}
