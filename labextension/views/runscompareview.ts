/**
 * The selected runs of the Runs view in pictures: one chart of a chosen metric with a line per
 * run (x: step, epoch or time; TensorBoard's smoothing, the raw line faint behind), and one
 * chart of a chosen hparam against a chosen final metric, a dot per run. A run keeps its
 * colour (a theme-following `jp-mod-color-N` class) in both charts and in the legend.
 */
import { ComparePoints } from '../models/comparepoints';
import { formatMetric } from '../render/format';
import {
  dotPlot,
  hparamDots,
  IScale,
  linePlot,
  PLOT_SIZE,
  runKey,
  runLabels,
  ISeries,
  seriesPoints,
  XAxis
} from '../models/runcompare';
import { RunsTableModel } from '../models/runsmodel';
import type { IRunSummary } from '../rest/types';

/** How many colours the stylesheet has (`jp-mod-color-0` …). */
const COLOURS = 8;

const SVG = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
  text?: string
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    el.textContent = text;
  }
  return el;
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text = ''
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  el.className = className;
  el.textContent = text;
  return el;
}

/** A labelled `<select>` of `options` keeping `current` when it is one of them. */
function choice(
  label: string,
  name: string,
  options: readonly string[],
  current: string,
  onChange: (value: string) => void
): HTMLLabelElement {
  const wrap = element('label', 'jp-DistTrainCompare-choice', `${label} `);
  const select = element('select', 'jp-mod-styled');
  select.name = name;
  for (const value of options) {
    const option = element('option', '', value);
    option.value = value;
    select.append(option);
  }
  select.value = current;
  select.disabled = options.length === 0;
  select.addEventListener('change', () => onChange(select.value));
  wrap.append(select);
  return wrap;
}

/** The axes' lines and their end values. */
function axes(x: IScale, y: IScale, xText: [string, string] | null): SVGElement[] {
  const { width, height, left, bottom, pad } = PLOT_SIZE;
  const base = height - bottom;
  const fmt = (v: number) => formatMetric(v);
  const out: SVGElement[] = [
    svg('line', {
      class: 'jp-DistTrainCompare-axis',
      x1: left,
      x2: width - pad,
      y1: base,
      y2: base
    }),
    svg('line', { class: 'jp-DistTrainCompare-axis', x1: left, x2: left, y1: pad, y2: base }),
    svg(
      'text',
      { class: 'jp-DistTrainCompare-tick', x: left - 4, y: pad + 4, 'text-anchor': 'end' },
      fmt(y.max)
    ),
    svg(
      'text',
      { class: 'jp-DistTrainCompare-tick', x: left - 4, y: base, 'text-anchor': 'end' },
      fmt(y.min)
    )
  ];
  const [x0, x1] = xText ?? [fmt(x.min), fmt(x.max)];
  out.push(
    svg('text', { class: 'jp-DistTrainCompare-tick', x: left, y: height - 6 }, x0),
    svg(
      'text',
      { class: 'jp-DistTrainCompare-tick', x: width - pad, y: height - 6, 'text-anchor': 'end' },
      x1
    )
  );
  return out;
}

function plotSvg(label: string): SVGSVGElement {
  const { width, height } = PLOT_SIZE;
  return svg('svg', {
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': label
  });
}

/** The charts under the Runs view's table (a part of its node, not a widget of its own). */
export class RunsCompare {
  constructor(
    readonly model: RunsTableModel,
    readonly points: ComparePoints
  ) {
    this.node.className = 'jp-DistTrainCompare';
    model.changed.connect(this._sync, this);
    points.changed.connect(this._render, this);
    this._sync();
  }

  readonly node = document.createElement('section');

  /** The chart's metric, x axis and smoothing; the dot chart's hparam and final metric. */
  metric = '';
  x: XAxis = 'step';
  smoothing = 0.6;
  hparam = '';
  finalMetric = '';

  dispose(): void {
    this.model.changed.disconnect(this._sync, this);
    this.points.dispose();
  }

  /**
   * Read the selected runs on when the selection changed or a selected run may have grown;
   * redraw only when the selected runs changed (a redraw would close an open drop-down).
   */
  private _sync(): void {
    const selected = this.model.selected;
    const keys = selected.map(runKey).join('\n');
    const growing = selected.some(r => r.status === 'running');
    if (keys !== this._keys || growing) {
      void this.points.load(selected);
    }
    const shown = JSON.stringify(selected);
    if (shown !== this._shown || keys !== this._keys) {
      this._keys = keys;
      this._shown = shown;
      this._render();
    }
  }

  private _render(): void {
    const runs = this.model.selected;
    if (!runs.length) {
      this.node.replaceChildren(
        element(
          'p',
          'jp-DistTrainCompare-empty',
          'Select runs in the table to compare them in charts.'
        )
      );
      return;
    }
    const colours = new Map(runs.map((r, i) => [runKey(r), `jp-mod-color-${i % COLOURS}`]));
    const figures = element('div', 'jp-DistTrainCompare-figures');
    figures.append(this._lineFigure(runs, colours), this._dotFigure(runs, colours));
    const children: HTMLElement[] = [this._legend(runs, colours), figures];
    if (this.points.error) {
      children.push(
        element('p', 'jp-DistTrainCompare-error', `Cannot read the points: ${this.points.error}`)
      );
    }
    this.node.replaceChildren(...children);
  }

  private _legend(runs: readonly IRunSummary[], colours: Map<string, string>): HTMLElement {
    const labels = runLabels(runs);
    const legend = element('ul', 'jp-DistTrainCompare-legend');
    legend.setAttribute('aria-label', 'Runs compared');
    for (const run of runs) {
      const key = runKey(run);
      const item = element('li', colours.get(key)!);
      item.dataset.run = key;
      item.append(element('span', 'jp-DistTrainCompare-swatch'), labels.get(key)!);
      legend.append(item);
    }
    return legend;
  }

  /** The chosen metric of every selected run, one line each. */
  private _lineFigure(runs: readonly IRunSummary[], colours: Map<string, string>): HTMLElement {
    const keys = new Set<string>();
    runs.forEach(r => this.points.get(r)?.series.forEach((_, k) => keys.add(k)));
    const metrics = [...keys].sort();
    if (!metrics.includes(this.metric)) {
      this.metric = metrics.find(m => m.endsWith('loss')) ?? metrics[0] ?? '';
    }
    const figure = element('figure', 'jp-DistTrainCompare-figure jp-mod-lines');
    const controls = element('figcaption', 'jp-DistTrainCompare-controls');
    controls.append(
      choice('Metric', 'metric', metrics, this.metric, v => this._set(() => (this.metric = v))),
      choice('x', 'x', ['step', 'epoch', 'time'], this.x, v =>
        this._set(() => (this.x = v as XAxis))
      ),
      this._smoothingSlider()
    );
    figure.append(controls);
    const labels = runLabels(runs);
    const series = (smoothing: number): ISeries[] =>
      runs.map(r => ({
        key: runKey(r),
        label: labels.get(runKey(r))!,
        points: seriesPoints(this.points.get(r)?.series.get(this.metric) ?? [], this.x, smoothing)
      }));
    const smooth = series(this.smoothing);
    const drawn = smooth.filter(s => s.points.length);
    if (!drawn.length) {
      figure.append(
        element(
          'p',
          'jp-DistTrainCompare-empty',
          this.metric ? `No ${this.metric} point has an ${this.x}.` : 'No metric logged yet.'
        )
      );
      return figure;
    }
    const raw = this.smoothing > 0 ? series(0) : [];
    // one scale for the raw and the smoothed lines
    const plot = linePlot([...smooth, ...raw]);
    const chart = plotSvg(`${this.metric} against ${this.x}, ${drawn.length} runs`);
    chart.append(...axes(plot.x, plot.y, null));
    raw.forEach((s, i) => {
      const path = plot.paths[smooth.length + i];
      if (path) {
        chart.append(
          svg('path', { class: `jp-DistTrainCompare-raw ${colours.get(s.key)}`, d: path })
        );
      }
    });
    smooth.forEach((s, i) => {
      if (plot.paths[i]) {
        const line = svg('path', {
          class: `jp-DistTrainCompare-line ${colours.get(s.key)}`,
          d: plot.paths[i],
          'data-run': s.key
        });
        line.append(svg('title', {}, s.label));
        chart.append(line);
      }
    });
    figure.append(chart);
    return figure;
  }

  private _smoothingSlider(): HTMLLabelElement {
    const wrap = element('label', 'jp-DistTrainCompare-choice', 'Smoothing ');
    const slider = element('input', 'jp-DistTrainCompare-smoothing');
    slider.type = 'range';
    slider.min = '0';
    slider.max = '0.99';
    slider.step = '0.01';
    slider.value = String(this.smoothing);
    const shown = element(
      'output',
      'jp-DistTrainCompare-smoothingValue',
      this.smoothing.toFixed(2)
    );
    slider.addEventListener('change', () =>
      this._set(() => (this.smoothing = Number(slider.value)))
    );
    slider.addEventListener('input', () => (shown.textContent = Number(slider.value).toFixed(2)));
    wrap.append(slider, shown);
    return wrap;
  }

  /** A chosen hparam against a chosen final metric, one dot per run. */
  private _dotFigure(runs: readonly IRunSummary[], colours: Map<string, string>): HTMLElement {
    const names = (pick: (r: IRunSummary) => object) =>
      [...new Set(([] as string[]).concat(...runs.map(r => Object.keys(pick(r)))))].sort();
    const hparams = names(r => r.hparams);
    const metrics = names(r => r.metrics);
    if (!hparams.includes(this.hparam)) {
      const differ = this.model.columns.find(c => c.kind === 'hparam')?.label;
      this.hparam = differ && hparams.includes(differ) ? differ : (hparams[0] ?? '');
    }
    if (!metrics.includes(this.finalMetric)) {
      this.finalMetric = metrics.includes(this.metric) ? this.metric : (metrics[0] ?? '');
    }
    const figure = element('figure', 'jp-DistTrainCompare-figure jp-mod-dots');
    const controls = element('figcaption', 'jp-DistTrainCompare-controls');
    controls.append(
      choice('Hyper-parameter', 'hparam', hparams, this.hparam, v =>
        this._set(() => (this.hparam = v))
      ),
      choice('Final metric', 'final', metrics, this.finalMetric, v =>
        this._set(() => (this.finalMetric = v))
      )
    );
    figure.append(controls);
    const { dots, categories } = hparamDots(runs, this.hparam, this.finalMetric);
    if (!dots.length) {
      figure.append(element('p', 'jp-DistTrainCompare-empty', 'No selected run has both.'));
      return figure;
    }
    const plot = dotPlot(dots, categories);
    const chart = plotSvg(`${this.finalMetric} against ${this.hparam}, ${dots.length} runs`);
    const ends: [string, string] | null = categories
      ? [categories[0], categories[categories.length - 1]]
      : null;
    chart.append(...axes(plot.x, plot.y, ends));
    dots.forEach((dot, i) => {
      const circle = svg('circle', {
        class: `jp-DistTrainCompare-dot ${colours.get(dot.key)}`,
        cx: plot.at[i].x,
        cy: plot.at[i].y,
        r: 4,
        'data-run': dot.key
      });
      circle.append(
        svg(
          'title',
          {},
          `${dot.label}: ${this.hparam}=${dot.xText}, ${this.finalMetric}=${formatMetric(dot.y)}`
        )
      );
      chart.append(circle);
    });
    if (plot.x.log) {
      chart.append(
        svg(
          'text',
          {
            class: 'jp-DistTrainCompare-tick',
            x: PLOT_SIZE.width / 2,
            y: PLOT_SIZE.height - 6,
            'text-anchor': 'middle'
          },
          'log scale'
        )
      );
    }
    figure.append(chart);
    return figure;
  }

  private _set(change: () => void): void {
    change();
    this._render();
  }

  private _keys = '';
  private _shown = '';
}
