/**
 * "Which rank is stuck, in which collective, at which cell line" in the job details: the
 * guard's word (stalled or idle), the Diagnose action, the newest diagnosis's verdict with each
 * rank's part, the earlier ones; and what the job held and used (GPU- or core-hours). Plain DOM
 * from `DiagnosisModel` and the job, redrawn with the details.
 */
import { DiagnosisModel } from '../models/diagnosismodel';
import { keyValues, nameRows, section, table } from '../render/dom';
import { formatTime } from '../render/format';
import type { IGuardState, IIncident, IJobDetail, IResourceHours } from '../rest/client';

function el(tag: string, className: string, text = ''): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

/** The sidebar's and the details' badge of a job its guard flagged: stalled or idle. */
export function guardBadge(guard: IGuardState): HTMLSpanElement {
  const badge = el('span', `jp-DistTrain-badge jp-DistTrain-guard jp-mod-${guard.state}`);
  badge.textContent = guard.state === 'stalled' && guard.busy ? 'stalled, busy' : guard.state;
  badge.title = guard.message;
  return badge as HTMLSpanElement;
}

function diagnoseButton(model: DiagnosisModel): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'jp-Button jp-mod-styled jp-mod-accept jp-DistTrainDiagnosis-run';
  b.textContent = model.busy ? 'Diagnosing…' : 'Diagnose';
  b.disabled = model.busy;
  b.title = 'Ask every rank which collective it is in and where: which rank is stuck, and why';
  b.dataset.focusKey = 'diagnose';
  b.addEventListener('click', () => void model.diagnose());
  return b;
}

/** The verdict and each rank's part. */
function incidentView(incident: IIncident): HTMLElement {
  const box = el('div', 'jp-DistTrainDiagnosis-incident');
  box.dataset.incident = incident.name;
  const when = `${formatTime(incident.time)} · ${incident.trigger} · ${incident.seconds.toFixed(2)} s`;
  box.append(
    el('p', 'jp-DistTrainDiagnosis-verdict', incident.verdict),
    el('p', 'jp-DistTrainDiagnosis-when', `${when} · ${analyzerText(incident.analyzer)}`)
  );
  const rows = incident.ranks.map(r => [
    r.replica,
    stateBadge(r.state),
    r.collective ?? '–',
    r.where ?? '–',
    sourceCell(r.source),
    r.note ?? ''
  ]);
  const t = table(['Rank', 'State', 'Collective', 'Where', 'Line', 'Note'], rows);
  t.classList.add('jp-DistTrainDiagnosis-ranks');
  nameRows(
    t,
    'replica',
    incident.ranks.map(r => r.replica)
  );
  box.append(t);
  for (const r of incident.ranks.filter(r => r.stack)) {
    const folded = document.createElement('details');
    folded.className = 'jp-DistTrainDiagnosis-stack';
    folded.append(el('summary', '', `Stacks of ${r.replica}`), el('pre', '', r.stack ?? ''));
    box.append(folded);
  }
  for (const note of incident.notes) {
    box.append(el('p', 'jp-DistTrainDiagnosis-note', note));
  }
  return box;
}

function analyzerText(analyzer: string): string {
  if (analyzer === 'torch') {
    return "collectives matched by torch's Flight Recorder analyzer";
  }
  return analyzer === 'none' ? 'no Flight Recorder record' : 'collectives matched by disttrain';
}

function stateBadge(state: string): HTMLElement {
  const badge = el('span', 'jp-DistTrain-badge jp-DistTrainDiagnosis-state', state);
  badge.dataset.state = state.replace(/ /g, '-');
  return badge;
}

function sourceCell(source: string | null): HTMLElement | string {
  return source ? el('code', '', source) : '–';
}

/** The Overview's Diagnosis section: the guard's word, the action, the newest verdict, the rest. */
export function diagnosisSection(job: IJobDetail, model: DiagnosisModel): HTMLElement[] {
  model.follow(job);
  const running = job.status.phase === 'Running';
  const incidents = job.incidents ?? [];
  if (!running && !incidents.length) {
    return [];
  }
  const out: HTMLElement[] = [section('Diagnosis')];
  const guard = job.summary.guard;
  if (guard) {
    const line = el('p', 'jp-DistTrainDiagnosis-guard');
    line.append(guardBadge(guard), ` ${guard.message} (action: ${guard.action})`);
    out.push(line);
  }
  if (running) {
    const bar = el('div', 'jp-DistTrainDiagnosis-actions');
    bar.append(diagnoseButton(model));
    if (model.error) {
      bar.append(el('span', 'jp-DistTrainDiagnosis-error', model.error));
    }
    out.push(bar);
  }
  if (model.incident) {
    out.push(incidentView(model.incident));
  }
  const earlier = incidents.filter(i => i.name !== model.incident?.name);
  if (earlier.length) {
    const rows = earlier.map(i => [formatTime(i.time), i.trigger, i.verdict]);
    const t = table(['Time', 'Trigger', 'Verdict'], rows, 'jp-DistTrainDiagnosis-earlier');
    nameRows(
      t,
      'incident',
      earlier.map(i => i.name)
    );
    const folded = document.createElement('details');
    folded.className = 'jp-DistTrainDiagnosis-history';
    const noun = earlier.length === 1 ? 'diagnosis' : 'diagnoses';
    folded.append(el('summary', '', `${earlier.length} earlier ${noun}`), t);
    out.push(folded);
  }
  return out;
}

/** "1.24 GPU-hours allocated, 0.81 used (65 %) · 3.10 USD" */
export function hoursText(hours: IResourceHours): string {
  const unit = hours.unit === 'gpu' ? 'GPU-hours' : 'core-hours';
  const share =
    hours.allocated > 0 ? ` (${Math.round((100 * hours.used) / hours.allocated)} %)` : '';
  const text = `${fmt(hours.allocated)} ${unit} allocated, ${fmt(hours.used)} used${share}`;
  const cost =
    hours.cost !== undefined && hours.cost !== null
      ? ` · ${hours.cost.toFixed(2)}${hours.currency ? ` ${hours.currency}` : ''}`
      : '';
  return text + cost;
}

function fmt(h: number): string {
  return h >= 10 ? h.toFixed(1) : h >= 0.01 ? h.toFixed(2) : h.toPrecision(2);
}

/** The Runs table's cell: "1.2 GPU-h · 3.10 USD", the whole text as its tooltip. */
export function hoursCell(hours: IResourceHours): HTMLElement {
  const unit = hours.unit === 'gpu' ? 'GPU-h' : 'core-h';
  const cost =
    hours.cost !== undefined && hours.cost !== null
      ? ` · ${hours.cost.toFixed(2)}${hours.currency ? ` ${hours.currency}` : ''}`
      : '';
  const cell = el(
    'span',
    'jp-DistTrainDiagnosis-hoursCell',
    `${fmt(hours.allocated)} ${unit}${cost}`
  );
  cell.title = hoursText(hours);
  return cell;
}

/** What the job held and used, over its restarts (the Overview and Resources tabs). */
export function hoursSection(job: IJobDetail): HTMLElement[] {
  if (!job.hours) {
    return [];
  }
  const rows: [string, string][] = [['Resource-hours', hoursText(job.hours)]];
  return [keyValues(rows, 'jp-DistTrainDiagnosis-hours')];
}
