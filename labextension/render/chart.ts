/**
 * Small hand-drawn SVG line charts of one metric (a few hundred points, redrawn as they
 * arrive): no charting library for a sparkline. `chartGeometry` is the pure part (tested);
 * `renderChart` makes the element, coloured by theme variables through CSS classes.
 *
 * x is the step (the point's index when it has none), in the order the points were logged,
 * so a step that went back draws the line back and is marked. NaN and infinities break the
 * line and are marked at the bottom (NaN, −∞) or top (+∞) edge. A run resumed from a
 * checkpoint (`IRunDetail.resumed_at`) is one line with a vertical marker at each resume step.
 */
import { formatMetric, metricNumber } from './format';
import type { IRunPoint } from '../rest/types';

export type MarkKind = 'backwards' | 'nan' | 'inf' | '-inf';

export interface IMark {
  x: number;
  y: number;
  kind: MarkKind;
  /** What the mark's tooltip says. */
  label: string;
}

export interface IChartGeometry {
  /** The SVG path of the line (`M`/`L` commands; a new `M` after each non-finite point). */
  path: string;
  /** Points with no finite neighbour to draw a line to (a dot each). */
  dots: { x: number; y: number }[];
  marks: IMark[];
  /** The finite values' range (null without a finite value). */
  min: number | null;
  max: number | null;
  /** The x range: first and last step (or index). */
  xMin: number;
  xMax: number;
  /** Where the run continued from a checkpoint: a vertical marker at each step in range. */
  resumes: { x: number; step: number }[];
}

export interface IChartSize {
  width: number;
  height: number;
  /** Inset on every side, so markers at the edges stay whole. */
  pad: number;
}

export const CHART_SIZE: IChartSize = { width: 240, height: 60, pad: 4 };

const round = (v: number) => Math.round(v * 10) / 10;

/**
 * Where each point of `points` goes in a `size` box, and the marks it needs; `resumedAt`: the
 * steps the run continued from a checkpoint at.
 */
export function chartGeometry(
  points: readonly IRunPoint[],
  size: IChartSize = CHART_SIZE,
  resumedAt: readonly number[] = []
): IChartGeometry {
  const xs = points.map((p, i) => p.step ?? i);
  const values = points.map(p => metricNumber(p.value));
  const finite = values.filter(Number.isFinite);
  const min = finite.length ? Math.min(...finite) : null;
  const max = finite.length ? Math.max(...finite) : null;
  const xMin = xs.length ? Math.min(...xs) : 0;
  const xMax = xs.length ? Math.max(...xs) : 0;
  const { width, height, pad } = size;
  const top = pad;
  const bottom = height - pad;
  const px = (x: number) =>
    round(xMax === xMin ? width / 2 : pad + ((x - xMin) / (xMax - xMin)) * (width - 2 * pad));
  const py = (v: number) =>
    round(
      min === null || max === null || max === min
        ? height / 2
        : bottom - ((v - min) / (max - min)) * (bottom - top)
    );

  const commands: string[] = [];
  const marks: IMark[] = [];
  const dots: { x: number; y: number }[] = [];
  let pen = false; // whether the line goes on from the previous point
  const alone = (i: number) =>
    !Number.isFinite(values[i - 1] ?? NaN) && !Number.isFinite(values[i + 1] ?? NaN);
  points.forEach((point, i) => {
    const v = values[i];
    const x = px(xs[i]);
    const at = `step ${point.step ?? '–'}: ${formatMetric(point.value)}`;
    if (!Number.isFinite(v)) {
      const kind: MarkKind = Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
      marks.push({ x, y: kind === 'inf' ? top : bottom, kind, label: at });
      pen = false;
      return;
    }
    const y = py(v);
    commands.push(`${pen ? 'L' : 'M'}${x} ${y}`);
    pen = true;
    if (alone(i)) {
      dots.push({ x, y });
    }
    if (point.flags.includes('step_backwards')) {
      marks.push({ x, y, kind: 'backwards', label: `${at} (the step went back)` });
    }
  });
  // on the step axis only (points without steps are drawn by index), and within the line
  const stepped = points.some(p => p.step !== null);
  const resumes = resumedAt
    .filter(step => stepped && step >= xMin && step <= xMax)
    .map(step => ({ x: px(step), step }));
  return { path: commands.join(' '), dots, marks, min, max, xMin, xMax, resumes };
}

const SVG = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, String(v));
  }
  return el;
}

/** A dashed vertical line at the step a run continued from a checkpoint. */
function resumeMarker(resume: { x: number; step: number }, size: IChartSize): SVGLineElement {
  const marker = svg('line', {
    class: 'jp-DistTrainChart-resume',
    x1: resume.x,
    x2: resume.x,
    y1: 0,
    y2: size.height,
    'data-step': resume.step
  });
  const title = svg('title', {});
  title.textContent = `resumed from a checkpoint at step ${resume.step}`;
  marker.append(title);
  return marker;
}

/** A figure: the metric's name and last value, then its line with marks and its y range. */
export function renderChart(
  key: string,
  points: readonly IRunPoint[],
  size: IChartSize = CHART_SIZE,
  resumedAt: readonly number[] = []
): HTMLElement {
  const g = chartGeometry(points, size, resumedAt);
  const figure = document.createElement('figure');
  figure.className = 'jp-DistTrainChart';
  figure.dataset.metric = key;

  const caption = document.createElement('figcaption');
  const name = document.createElement('span');
  name.className = 'jp-DistTrainChart-name';
  name.textContent = key;
  const last = points[points.length - 1];
  const value = document.createElement('span');
  value.className = 'jp-DistTrainChart-value';
  value.textContent = last ? formatMetric(last.value) : '–';
  value.title = last ? `step ${last.step ?? '–'}` : '';
  caption.append(name, value);

  const chart = svg('svg', {
    viewBox: `0 0 ${size.width} ${size.height}`,
    width: size.width,
    height: size.height,
    role: 'img',
    'aria-label': `${key}: ${points.length} points, last ${value.textContent}`
  });
  chart.append(
    svg('line', {
      class: 'jp-DistTrainChart-axis',
      x1: 0,
      x2: size.width,
      y1: size.height - 0.5,
      y2: size.height - 0.5
    }),
    ...g.resumes.map(resume => resumeMarker(resume, size)),
    svg('path', { class: 'jp-DistTrainChart-line', d: g.path })
  );
  for (const dot of g.dots) {
    chart.append(svg('circle', { class: 'jp-DistTrainChart-dot', cx: dot.x, cy: dot.y, r: 2 }));
  }
  for (const mark of g.marks) {
    const shape = svg('circle', {
      class: `jp-DistTrainChart-mark jp-mod-${mark.kind}`,
      cx: mark.x,
      cy: mark.y,
      r: 2.5
    });
    const title = svg('title', {});
    title.textContent = mark.label;
    shape.append(title);
    chart.append(shape);
  }

  const range = document.createElement('div');
  range.className = 'jp-DistTrainChart-range';
  range.textContent =
    g.min === null
      ? `${points.length} points, none finite`
      : `${formatMetric(g.min)} … ${formatMetric(g.max)} · steps ${g.xMin}–${g.xMax}`;
  figure.append(caption, chart, range);
  return figure;
}
