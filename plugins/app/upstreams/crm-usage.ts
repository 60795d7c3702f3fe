import type { DailyUsage, DailyUsageStore, LimitSource } from '../../../integrations/crm/daily-usage.js'
import { percentOf } from '../../../lib/numbers.js'
import type { MonitoringSource } from '../monitoring/index.js'

/** The CRM's daily API usage as the health endpoints report it: `used` counts against `limit`. */
export interface CrmUsageReport {
  used: number
  limit: number | null
  percent: number | null
  limitSource: LimitSource
}

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    crmUsage: CrmUsageReport
  }
}

export function usageReport ({ used, limit, limitSource }: DailyUsage): CrmUsageReport {
  return { used: used ?? 0, limit, percent: percentOf(used ?? 0, limit), limitSource }
}

/** The CRM's daily API usage against its quota. */
export function crmUsagePart (dailyUsage: DailyUsageStore): MonitoringSource<CrmUsageReport> {
  return {
    description: 'the CRM daily usage store',
    read: async () => usageReport(await dailyUsage.read()),
    measures: {
      crm_daily_usage: ({ used, limit }) => limit === null || limit === 0
        ? { value: null, note: 'no data: neither the CRM nor CRM_DAILY_API_LIMIT has given a limit' }
        : { value: (100 * used) / limit }
    },
    metrics: [
      { name: 'portal_bff_crm_daily_api_requests', help: 'CRM API requests of the last 24 hours, as the CRM reports them', type: 'gauge', samples: (usage) => [{ value: usage.used }] },
      { name: 'portal_bff_crm_daily_api_limit', help: 'The CRM daily API quota; absent while unknown', type: 'gauge', samples: (usage) => usage.limit === null ? [] : [{ value: usage.limit }] }
    ]
  }
}
