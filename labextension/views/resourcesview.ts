/**
 * How a job's resources read in its details: the Resources section (one sparkline per
 * replica per measure, the latest value beside it), the replica table's extra columns and
 * the "quiet" badge. Plain DOM from `ResourcesModel`, redrawn with the details.
 */
import { nameRows, table } from '../render/dom';
import { formatDuration } from '../render/format';
import { IMeasure, measureMax, ResourcesModel } from '../models/resourcesmodel';
import { sparkline } from '../render/sparkline';
import type { IReplicaResources } from '../rest/types';

const SPARK = { width: 140, height: 28 };

/** The "quiet" badge of a replica (or, in the job list, a job with replicas) that has been
 * silent for longer than usual; `title` says which, for a job. */
export function quietBadge(
  title = 'No output or progress for much longer than this rank usually takes'
): HTMLSpanElement {
  const badge = document.createElement('span');
  badge.className = 'jp-DistTrain-badge jp-DistTrain-quiet';
  badge.textContent = 'quiet';
  badge.title = title;
  return badge;
}

/** Headers of the replica table's resource columns (the GPU ones only where there is a GPU). */
export function usageHeaders(model: ResourcesModel): string[] {
  return [...model.measures().map(m => m.label), 'Last output'];
}

/**
 * The replica's latest values for `usageHeaders`, en dashes where it has none. An ended
 * replica uses nothing now: no values, and its last output at the time it was written.
 */
export function usageCells(model: ResourcesModel, replica: string): string[] {
  const series = model.replicas.get(replica);
  const sample = series?.ended ? null : model.current(replica);
  const values = model.measures().map(m => {
    const v = sample ? m.value(sample) : null;
    return v === null ? '–' : m.format(v);
  });
  return [...values, lastOutput(model, series)];
}

/** "12s ago" on the server's clock while the replica runs, the clock time once it ended. */
function lastOutput(model: ResourcesModel, series: IReplicaResources | undefined): string {
  const t = series?.last_output;
  if (t === null || t === undefined || model.now === null) {
    return '–';
  }
  if (series?.ended) {
    return new Date(t * 1000).toLocaleTimeString();
  }
  return `${formatDuration((model.now - t) * 1000)} ago`;
}

/** What the series are, or why there are none. */
function note(model: ResourcesModel): string {
  if (model.error) {
    return `Cannot load resources: ${model.error}`;
  }
  const parts: string[] = [];
  if (model.source === 'sampler') {
    parts.push(`Sampled every ${model.interval ?? '?'} s by the launcher.`);
  } else if (model.source) {
    parts.push(`From ${model.source}, every ${model.interval ?? '?'} s.`);
  }
  if (model.message) {
    parts.push(model.message);
  }
  if (!model.replicas.size && !model.message) {
    parts.push(model.done ? 'No samples were taken.' : 'No samples yet.');
  }
  return parts.join(' ');
}

/** A measure's sparkline for one replica, with its latest value. */
function chartCell(model: ResourcesModel, replica: string, measure: IMeasure): HTMLElement {
  const samples = model.replicas.get(replica)?.samples ?? [];
  const values = model.series(replica, measure);
  const latest = [...values].reverse().find(v => v !== null);
  const last = latest === undefined || latest === null ? '–' : measure.format(latest);
  // an ended replica's last value is history, not what it uses now
  const ended = !!model.replicas.get(replica)?.ended;
  const shown = ended ? 'ended' : last;
  const cell = document.createElement('div');
  cell.className = 'jp-DistTrainResources-cell';
  cell.classList.toggle('jp-mod-ended', ended);
  cell.dataset.measure = measure.key;
  const max = samples.length ? measureMax(measure, samples) : measure.minMax;
  cell.append(
    sparkline(values, {
      ...SPARK,
      max,
      kind: measure.key,
      label: `${replica} ${measure.label}: ${ended ? `ended, last ${last}` : last} (scale 0–${measure.format(max)})`
    })
  );
  const value = document.createElement('span');
  value.className = 'jp-DistTrainResources-value';
  value.textContent = shown;
  if (ended) {
    value.title = `last sample before it ended: ${last}`;
  }
  cell.append(value);
  return cell;
}

/** The Resources section's body: a note, then a grid of replicas × measures. */
export function resourcesSection(model: ResourcesModel): HTMLElement {
  const root = document.createElement('div');
  root.className = 'jp-DistTrainResources';
  const text = note(model);
  if (text) {
    const p = document.createElement('div');
    p.className = 'jp-DistTrainResources-note';
    p.classList.toggle('jp-mod-error', !!model.error);
    p.textContent = text;
    root.append(p);
  }
  if (!model.replicas.size) {
    return root;
  }
  const measures = model.measures();
  const names = [...model.replicas.keys()];
  const rows = names.map(name => {
    const label = document.createElement('span');
    label.textContent = name;
    const series = model.replicas.get(name)!;
    if (series.quiet) {
      label.append(' ', quietBadge());
    }
    if (series.ended) {
      label.title = `${name} has exited: its series ends here`;
    }
    return [label, ...measures.map(m => chartCell(model, name, m))];
  });
  const grid = table(
    ['Replica', ...measures.map(m => m.label)],
    rows,
    'jp-DistTrainResources-grid'
  );
  nameRows(grid, 'replica', names);
  root.append(grid);
  return root;
}
