import { TraceFlags, type Attributes, type Context, type Link, type SpanKind } from '@opentelemetry/api'
import {
  AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler, type Sampler,
  type SamplingResult
} from '@opentelemetry/sdk-trace-node'

/*
 * The sampler OTEL_TRACES_SAMPLER names, with one difference in its parent-based forms: a span
 * without a parent that links to another (a platform event's hand-off to its order's placement, a
 * provisioning job to the span that queued it) follows that span's decision, as a child follows its
 * parent's. An order kept at placement is kept whole; one left out is left out whole. Loaded with
 * the SDK only.
 */

/** A span with no parent follows its first link's sampled flag; one without links is asked of `root`. */
class FollowsItsLink implements Sampler {
  constructor (private readonly root: Sampler) {}

  shouldSample (
    context: Context,
    traceId: string,
    name: string,
    kind: SpanKind,
    attributes: Attributes,
    links: Link[]
  ): SamplingResult {
    const origin = links[0]?.context
    if (origin === undefined) return this.root.shouldSample(context, traceId, name, kind, attributes, links)
    return {
      decision:
        (origin.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED
          ? SamplingDecision.RECORD_AND_SAMPLED
          : SamplingDecision.NOT_RECORD
    }
  }

  toString (): string {
    return `FollowsItsLink{root=${this.root.toString()}}`
  }
}

/** OTEL_TRACES_SAMPLER_ARG as a ratio, 1 when it is not one (a warning at start says so). */
function ratioOf (env: NodeJS.ProcessEnv): number {
  const value = env.OTEL_TRACES_SAMPLER_ARG?.trim() ?? ''
  const ratio = Number(value)
  return value !== '' && ratio >= 0 && ratio <= 1 ? ratio : 1
}

/**
 * The sampler of OTEL_TRACES_SAMPLER (default parentbased_always_on, also for a name it does not know: a
 * warning at start says so).
 */
export function samplerOf (env: NodeJS.ProcessEnv): Sampler {
  const name = env.OTEL_TRACES_SAMPLER?.trim() ?? ''
  const roots: Record<string, () => Sampler> = {
    always_on: () => new AlwaysOnSampler(),
    always_off: () => new AlwaysOffSampler(),
    traceidratio: () => new TraceIdRatioBasedSampler(ratioOf(env))
  }
  if (name in roots) return roots[name]!()
  const root = name.startsWith('parentbased_') ? roots[name.slice('parentbased_'.length)] : undefined
  return new ParentBasedSampler({ root: new FollowsItsLink(root?.() ?? new AlwaysOnSampler()) })
}
