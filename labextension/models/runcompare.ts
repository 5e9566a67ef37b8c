/**
 * Comparing runs, the pure part: which hparams differ among runs, TensorBoard's smoothing,
 * one series per run of a chosen metric against step, epoch or time, one dot per run of an
 * hparam against a final metric, and where each lands in a chart (shared scales). The Runs
 * view (`runscompareview.ts`) draws them.
 */
import { metricNumber } from '../render/format';
import type { IRunPoint, IRunSummary } from '../rest/types';

/** The id of a run across jobs. */
export function runKey(run: IRunSummary): string {
  return `${run.job_id}/${run.run}`;
}

/** A value as compared: a missing hparam differs from every present one. */
function valueKey(value: unknown): string {
  return value === undefined ? '\u0000missing' : JSON.stringify(value);
}

/** The hparam names whose values are not the same in every run of `runs`. */
export function differingHparams(runs: readonly IRunSummary[]): Set<string> {
  const names = new Set<string>();
  runs.forEach(r => Object.keys(r.hparams).forEach(k => names.add(k)));
  const out = new Set<string>();
  for (const name of names) {
    const values = new Set(runs.map(r => valueKey(r.hparams[name])));
    if (values.size > 1) {
      out.add(name);
    }
  }
  return out;
}

/**
 * TensorBoard's smoothing: an exponential moving average with `weight` in [0, 1), debiased so
 * the first points are not pulled towards zero. Non-finite values pass through unchanged and
 * do not enter the average.
 */
export function emaSmooth(values: readonly number[], weight: number): number[] {
  if (weight <= 0) {
    return [...values];
  }
  let last = 0;
  let count = 0;
  return values.map(v => {
    if (!Number.isFinite(v)) {
      return v;
    }
    last = last * weight + (1 - weight) * v;
    count++;
    return last / (1 - Math.pow(weight, count));
  });
}

export type XAxis = 'step' | 'epoch' | 'time';

export interface IXY {
  x: number;
  y: number;
}

/** One run's line in a chart. */
export interface ISeries {
  /** `runKey` of the run. */
  key: string;
  /** What the legend names it: the run, and its job when runs of several jobs are shown. */
  label: string;
  points: IXY[];
}

/**
 * A metric's points as (x, y): x the point's step, epoch or seconds since the run's first
 * point; points without that x and non-finite values left out (after smoothing, which they
 * do not enter).
 */
export function seriesPoints(points: readonly IRunPoint[], x: XAxis, smoothing = 0): IXY[] {
  const t0 = points.length ? points[0].time : 0;
  const xs = points.map(p => (x === 'time' ? p.time - t0 : p[x]));
  const ys = emaSmooth(
    points.map(p => metricNumber(p.value)),
    smoothing
  );
  const out: IXY[] = [];
  xs.forEach((xv, i) => {
    if (xv !== null && xv !== undefined && Number.isFinite(ys[i])) {
      out.push({ x: xv, y: ys[i] });
    }
  });
  return out;
}

/** The legend's name of each run: its job's name too when the runs come from several jobs. */
export function runLabels(runs: readonly IRunSummary[]): Map<string, string> {
  const jobs = new Set(runs.map(r => r.job_id));
  return new Map(
    runs.map(r => [runKey(r), jobs.size > 1 ? `${r.job_name}/${r.run}` : r.run] as const)
  );
}

/** One run as a dot: its hparam's value against its final metric. */
export interface IDot {
  key: string;
  label: string;
  x: number;
  y: number;
  /** The hparam's value as shown (a category's name when the values are not numbers). */
  xText: string;
}

/**
 * The runs with both `hparam` and a finite final `metric`, one dot each; an hparam that is
 * not a number in every run is a category (x = its index among the sorted distinct values).
 */
export function hparamDots(
  runs: readonly IRunSummary[],
  hparam: string,
  metric: string
): { dots: IDot[]; categories: string[] | null } {
  const labels = runLabels(runs);
  const usable = runs.filter(
    r => r.hparams[hparam] !== undefined && Number.isFinite(metricNumber(r.metrics[metric]))
  );
  const numeric = usable.every(r => typeof r.hparams[hparam] === 'number');
  const text = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));
  const categories = numeric ? null : [...new Set(usable.map(r => text(r.hparams[hparam])))].sort();
  const dots = usable.map(r => {
    const value = r.hparams[hparam];
    return {
      key: runKey(r),
      label: labels.get(runKey(r))!,
      x: categories ? categories.indexOf(text(value)) : (value as number),
      y: metricNumber(r.metrics[metric]),
      xText: text(value)
    };
  });
  return { dots, categories };
}

export interface IPlotSize {
  width: number;
  height: number;
  /** Room left of the plot (y labels) and below it (x labels). */
  left: number;
  bottom: number;
  pad: number;
}

export const PLOT_SIZE: IPlotSize = { width: 420, height: 220, left: 52, bottom: 22, pad: 8 };

/** A linear (or, for a positive range over two decades, logarithmic) map onto pixels. */
export interface IScale {
  min: number;
  max: number;
  log: boolean;
  at: (v: number) => number;
}

const round = (v: number) => Math.round(v * 10) / 10;

/** `values` onto [from, to]; `allowLog` picks a log scale for a wide positive range. */
export function scale(
  values: readonly number[],
  from: number,
  to: number,
  allowLog = false
): IScale {
  let min = values.length ? Math.min(...values) : 0;
  let max = values.length ? Math.max(...values) : 1;
  const log = allowLog && min > 0 && max / min >= 100;
  const f = (v: number) => (log ? Math.log10(v) : v);
  if (min === max) {
    // one value: centred
    min -= 1;
    max += 1;
  }
  const lo = f(min);
  const hi = f(max);
  return { min, max, log, at: v => round(from + ((f(v) - lo) / (hi - lo)) * (to - from)) };
}

export interface ILinePlot {
  x: IScale;
  y: IScale;
  /** The SVG path of each series (same order), '' for one with no point. */
  paths: string[];
}

/** Every series on shared scales (y grows upwards). */
export function linePlot(series: readonly ISeries[], size: IPlotSize = PLOT_SIZE): ILinePlot {
  const all = ([] as IXY[]).concat(...series.map(s => s.points));
  const x = scale(
    all.map(p => p.x),
    size.left,
    size.width - size.pad
  );
  const y = scale(
    all.map(p => p.y),
    size.height - size.bottom,
    size.pad
  );
  const paths = series.map(s =>
    s.points.map((p, i) => `${i ? 'L' : 'M'}${x.at(p.x)} ${y.at(p.y)}`).join(' ')
  );
  return { x, y, paths };
}

/** The dots on their scales: a numeric hparam over two decades (a learning rate) on a log one. */
export function dotPlot(
  dots: readonly IDot[],
  categories: string[] | null,
  size: IPlotSize = PLOT_SIZE
): { x: IScale; y: IScale; at: IXY[] } {
  const x = categories
    ? scale([-0.5, categories.length - 0.5], size.left, size.width - size.pad)
    : scale(
        dots.map(d => d.x),
        size.left + size.pad,
        size.width - 2 * size.pad,
        true
      );
  const y = scale(
    dots.map(d => d.y),
    size.height - size.bottom - size.pad,
    2 * size.pad
  );
  return { x, y, at: dots.map(d => ({ x: x.at(d.x), y: y.at(d.y) })) };
}
