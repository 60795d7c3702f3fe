import { usageReport, type CrmUsageReport, type DailyUsageStore } from '../../../integrations/crm/daily-usage.js'
import type { MonitoringSource } from '../monitoring/index.js'

declare module '../monitoring/index.js' {
  interface MonitoringParts {
    crmUsage: CrmUsageReport
  }
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
      {
        name: 'portal_bff_crm_daily_api_requests',
        help: 'CRM API requests of the last 24 hours, as the CRM reports them',
        type: 'gauge',
        samples: (usage) => [{ value: usage.used }]
      },
      {
        name: 'portal_bff_crm_daily_api_limit',
        help: 'The CRM daily API quota; absent while unknown',
        type: 'gauge',
        samples: (usage) => (usage.limit === null ? [] : [{ value: usage.limit }])
      }
    ]
  }
}
