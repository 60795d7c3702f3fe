/** A figure for a report: `digits` decimals at most. */
export function round (value: number, digits = 2): number {
  return Number(value.toFixed(digits))
}

/** `part` as a percent of `whole`, two decimals; null when there is no whole to judge against. */
export function percentOf (part: number, whole: number | null): number | null {
  return whole === null || whole === 0 ? null : round((100 * part) / whole)
}
