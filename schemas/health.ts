import { Type, type Static } from '@sinclair/typebox'
import { StringEnum } from './string-enum.js'

export const CheckStatus = StringEnum(['ok', 'fail'], { $id: 'CheckStatus' })

export const CoreHealthReport = Type.Object({
  status: StringEnum(['ok', 'degraded'], {
    description: '`ok` when every check is `ok`, `degraded` when one or more fail'
  }),
  checks: Type.Object({
    database: Type.Ref(CheckStatus),
    cache: Type.Ref(CheckStatus)
  }, { additionalProperties: false })
}, { $id: 'CoreHealthReport', title: 'Core health report', additionalProperties: false })
export type CoreHealthReport = Static<typeof CoreHealthReport>

export const ReadinessReport = Type.Object({
  status: StringEnum(['ok', 'degraded', 'draining'], {
    description: '`draining` from the shutdown signal on'
  }),
  checks: CoreHealthReport.properties.checks
}, { $id: 'ReadinessReport', title: 'Readiness report', additionalProperties: false })

export const LivenessReport = Type.Object({
  status: Type.Literal('ok')
}, { $id: 'LivenessReport', title: 'Liveness report', additionalProperties: false })
