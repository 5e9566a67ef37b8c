/**
 * Sparklines: a small hand-written SVG per series (no chart library: a polyline and its area
 * are all a trend at a glance needs). The geometry is pure (`sparklineGeometry`, tested); the
 * colours come from the theme through CSS classes (base.css), so light and dark both work.
 */

export interface ISparklineOptions {
  /** Drawing size in CSS pixels. */
  width: number;
  height: number;
  /** Top of the scale; the series' own maximum (at least `minMax`) when not given. */
  max?: number;
  /** The smallest top of an automatic scale (so a flat 0.1 % does not fill the box). */
  minMax?: number;
}

export interface ISparklineGeometry {
  /** SVG path of the line; a gap (null) in the series starts a new segment. */
  line: string;
  /** SVG path of the area under each segment (closed down to the baseline). */
  area: string;
  /** The top of the scale used. */
  max: number;
  /** Where the last point is drawn, if there is one. */
  last: { x: number; y: number } | null;
}

const round = (v: number): number => Math.round(v * 10) / 10;

/**
 * The paths of a sparkline of `values` spread evenly over the width, 0 at the bottom and
 * the scale's top at the top (values above it are clipped to it). A null is a gap: a sample
 * without that measure, drawn as a break, never as zero.
 */
export function sparklineGeometry(
  values: readonly (number | null)[],
  options: ISparklineOptions
): ISparklineGeometry {
  const { width, height } = options;
  const known = values.filter((v): v is number => v !== null && Number.isFinite(v));
  const max =
    options.max ?? Math.max(options.minMax ?? Number.MIN_VALUE, ...known.map(v => Math.abs(v)));
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const pad = 1; // keep the stroke inside the box
  const y = (v: number) =>
    round(height - pad - (Math.min(Math.max(v, 0), max) / max) * (height - 2 * pad));
  const line: string[] = [];
  const area: string[] = [];
  let segment: { x: number; y: number }[] = [];
  let last: { x: number; y: number } | null = null;
  const flush = () => {
    if (segment.length === 0) {
      return;
    }
    if (segment.length === 1) {
      // a lone point still shows: a short tick
      const { x, y } = segment[0];
      segment = [
        { x, y },
        { x: x + 2 <= width ? x + 2 : x - 2, y }
      ];
    }
    line.push(segment.map((p, i) => `${i ? 'L' : 'M'}${p.x} ${p.y}`).join(''));
    const first = segment[0];
    const end = segment[segment.length - 1];
    area.push(
      `M${first.x} ${height}` + segment.map(p => `L${p.x} ${p.y}`).join('') + `L${end.x} ${height}Z`
    );
    segment = [];
  };
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || !Number.isFinite(v)) {
      flush();
      continue;
    }
    const point = { x: round(values.length > 1 ? i * step : width), y: y(v) };
    segment.push(point);
    last = point;
  }
  flush();
  return { line: line.join(''), area: area.join(''), max, last };
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * A sparkline element: `label` is its accessible name and tooltip (e.g. "rank-0 CPU: 98 %").
 * `kind` picks the colour class (`jp-DistTrainSpark-cpu` …) from base.css.
 */
export function sparkline(
  values: readonly (number | null)[],
  options: ISparklineOptions & { label: string; kind: string }
): SVGSVGElement {
  const geometry = sparklineGeometry(values, options);
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('class', `jp-DistTrainSpark jp-DistTrainSpark-${options.kind}`);
  svg.setAttribute('width', String(options.width));
  svg.setAttribute('height', String(options.height));
  svg.setAttribute('viewBox', `0 0 ${options.width} ${options.height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', options.label);
  const title = document.createElementNS(SVG_NS, 'title');
  title.textContent = options.label;
  svg.append(title);
  const add = (className: string, d: string) => {
    if (!d) {
      return;
    }
    const path = document.createElementNS(SVG_NS, 'path');
    path.setAttribute('class', className);
    path.setAttribute('d', d);
    svg.append(path);
  };
  add('jp-DistTrainSpark-area', geometry.area);
  add('jp-DistTrainSpark-line', geometry.line);
  if (geometry.last) {
    const dot = document.createElementNS(SVG_NS, 'circle');
    dot.setAttribute('class', 'jp-DistTrainSpark-dot');
    dot.setAttribute('cx', String(geometry.last.x));
    dot.setAttribute('cy', String(geometry.last.y));
    dot.setAttribute('r', '1.8');
    svg.append(dot);
  }
  return svg;
}
