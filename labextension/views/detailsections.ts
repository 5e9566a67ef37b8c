/**
 * The sections of the job details, each drawn from the job on its own: the summary (name,
 * phase, why it ended, a backend that could not be reached), the spec, the replicas (with
 * their latest resource values and the Stack action), the resources, the conditions and the
 * events. `JobDetails` shows them in order; a view in tabs picks them by `id`.
 */
import { parseAnsi, renderAnsi } from '../render/ansi';
import { IJobDetail, TERMINAL_PHASES } from '../rest/client';
import { keyValues, nameRows, section, table } from '../render/dom';
import { formatTime, jobShape, rolesText } from '../render/format';
import { phaseBadge } from '../render/dom';
import { ResourcesModel } from '../models/resourcesmodel';
import { quietBadge, resourcesSection, usageCells, usageHeaders } from './resourcesview';
import { progressBar } from './runsection';
import { keptValues } from './valuessection';
import { diagnosisSection, hoursSection } from './diagnosis';
import { DiagnosisModel } from '../models/diagnosismodel';

/** What the sections draw besides the job. */
export interface IDetailsContext {
  /** The job's resource series (absent: no Resources section, no usage columns). */
  resources: ResourcesModel | null;
  /** Dump a replica's stacks (absent: no Stack action). */
  onStack: ((replica: string) => void) | null;
  /** The job's diagnoses (absent: no Diagnosis section). */
  diagnosis?: DiagnosisModel | null;
}

/** One section of the details; it draws nothing when the job has nothing for it. */
export interface IDetailsSection {
  /** `summary`, `progress`, `spec`, `replicas`, `values`, `resources`, `conditions`, `events`. */
  readonly id: string;
  render(job: IJobDetail, context: IDetailsContext): HTMLElement[];
}

function textElement(tag: string, text: string, className = ''): HTMLElement {
  const el = document.createElement(tag);
  el.className = className;
  el.textContent = text;
  return el;
}

function div(className: string, text: string): HTMLElement {
  return textElement('div', text, className);
}

/** The name, phase and id; why the job ended; why its status is the stored one. */
function summary(job: IJobDetail): HTMLElement[] {
  const { status } = job;
  const head = document.createElement('div');
  head.className = 'jp-DistTrainDetails-head';
  const h = document.createElement('h2');
  h.textContent = job.summary.name;
  const id = document.createElement('code');
  id.textContent = job.id;
  head.append(h, phaseBadge(status.phase), id);
  const out: HTMLElement[] = [head];
  if (job.failure) {
    out.push(...failureStory(job.failure, status.message ?? ''));
  } else if (status.reason || status.message) {
    const why = div(
      'jp-DistTrainDetails-reason',
      [status.reason, status.message].filter(Boolean).join(': ')
    );
    why.classList.toggle('jp-mod-failed', status.phase === 'Failed');
    out.push(why);
  }
  if (job.backend_error) {
    // The status shown is the stored one: say why the backend could not give a fresh one.
    const text = `Backend unavailable, showing the last stored status: ${job.backend_error}`;
    out.push(div('jp-DistTrainDetails-reason jp-mod-warn', text));
  }
  return out;
}

/** A `<details>` whose summary line opens `text` in monospace. */
function foldedText(summaryText: string, text: string, className: string): HTMLElement {
  const folded = document.createElement('details');
  folded.className = className;
  folded.append(textElement('summary', summaryText), textElement('pre', text));
  return folded;
}

/**
 * Why the job failed as the notebook's own error: the one-line headline, the root cause's
 * traceback mapped to the cells (ANSI colours as IPython's), and the traceback as the rank
 * printed it (else the whole status message) one click away.
 */
function failureStory(failure: NonNullable<IJobDetail['failure']>, message: string): HTMLElement[] {
  const out: HTMLElement[] = [div('jp-DistTrainDetails-reason jp-mod-failed', failure.headline)];
  if (failure.traceback) {
    const pre = document.createElement('pre');
    pre.className = 'jp-DistTrainDetails-traceback';
    renderAnsi(pre, parseAnsi(failure.traceback));
    out.push(pre);
  }
  const raw = failure.raw || message;
  if (raw) {
    const who = failure.replica || 'the job';
    out.push(foldedText(`Raw traceback, as ${who} printed it`, raw, 'jp-DistTrainDetails-raw'));
  }
  return out;
}

function spec(job: IJobDetail): HTMLElement[] {
  const { spec, status, summary } = job;
  const env = Object.entries(spec.env ?? {});
  const volumes = (spec.volumes ?? []).map(
    v => `${v.claim} → ${v.mount_path}${v.read_only ? ' (ro)' : ''}`
  );
  const args = (spec.args ?? []).join(' ');
  const torchrun = `torchrun --nnodes ${spec.nodes} --nproc-per-node ${spec.nproc_per_node}`;
  return [
    section('Spec'),
    keyValues([
      ['Backend', spec.backend],
      ['Launcher', spec.launcher],
      ['Roles', rolesText(job.roles, status.replicas)],
      ['Shape', `${jobShape(summary)} (world size ${spec.nodes * spec.nproc_per_node})`],
      ['Accelerator', spec.accelerator],
      ['Image', spec.image ?? '–'],
      ['CPU / memory', `${spec.cpu ?? '–'} / ${spec.memory ?? '–'}`],
      ['Volumes', volumes.length ? volumes.join(', ') : '–'],
      ['Env', env.length ? env.map(([k, v]) => `${k}=${v}`).join(' ') : '–'],
      ['Command', `${torchrun} ${spec.entrypoint} ${args}`.trim()],
      ['Created', formatTime(status.created ?? summary.created)],
      ['Started / finished', `${formatTime(status.start_time)} / ${formatTime(status.finish_time)}`]
    ])
  ];
}

function stackButton(replica: string, onStack: (replica: string) => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'jp-Button jp-mod-minimal jp-mod-small jp-DistTrainDetails-stack';
  b.textContent = 'Stack';
  b.title = `Dump the Python stacks of every thread of ${replica}`;
  b.setAttribute('aria-label', `Stack of ${replica}`);
  b.dataset.focusKey = `stack/${replica}`;
  b.addEventListener('click', () => onStack(replica));
  return b;
}

/** A replica that only stopped because `cause` left: quieter than a failure. */
function stoppedBadge(cause: string): HTMLSpanElement {
  const badge = phaseBadge('Cancelled');
  badge.classList.add('jp-DistTrain-stoppedByPeer');
  badge.textContent = `Stopped by ${cause}`;
  badge.title = `${cause} failed first; this replica stopped because it left`;
  return badge;
}

/** A stopped peer's own message (gloo's "Connection closed by peer"), one click away. */
function ownMessage(reason?: string | null, message?: string | null): HTMLElement | string {
  const text = [reason, message].filter(Boolean).join(': ');
  return text ? foldedText('its own message', text, 'jp-DistTrainDetails-peerMessage') : '–';
}

/** The root cause's row is marked (red), its stopped peers' rows quieter. */
function markCause(t: HTMLElement, names: string[], cause: string | undefined, peers: Set<string>) {
  t.querySelectorAll('tbody tr').forEach((row, i) => {
    row.classList.toggle('jp-mod-cause', names[i] === cause);
    row.classList.toggle('jp-mod-stoppedByPeer', peers.has(names[i]));
  });
}

/** The replica table: status, the latest resource values and the Stack action. */
function replicas(job: IJobDetail, { resources, onStack }: IDetailsContext): HTMLElement[] {
  const running = !TERMINAL_PHASES.has(job.status.phase);
  const head = [
    ...['Name', 'Role', 'Index', 'Phase', 'Restarts', 'Exit code', 'Reason', 'Node'],
    ...['Started', 'Finished', ...(resources ? usageHeaders(resources) : [])],
    ...(onStack ? [''] : [])
  ];
  const cause = job.failure?.replica;
  const peers = new Set(job.failure?.stopped_by_peer ?? []);
  const rows = job.status.replicas.map(r => {
    const stopped = cause && peers.has(r.name) ? cause : null;
    const name = document.createElement('span');
    name.textContent = r.name;
    if (resources?.replicas.get(r.name)?.quiet) {
      name.append(' ', quietBadge());
    }
    const cells: (string | HTMLElement)[] = [
      name,
      r.role,
      String(r.index),
      stopped ? stoppedBadge(stopped) : phaseBadge(r.phase),
      String(r.restarts),
      r.exit_code === null || r.exit_code === undefined ? '–' : String(r.exit_code),
      stopped
        ? ownMessage(r.reason, r.message)
        : [r.reason, r.message].filter(Boolean).join(': ') || '–',
      r.node ?? '–',
      formatTime(r.start_time),
      formatTime(r.finish_time),
      ...(resources ? usageCells(resources, r.name) : [])
    ];
    if (onStack) {
      const live = running && !TERMINAL_PHASES.has(r.phase);
      cells.push(live ? stackButton(r.name, onStack) : '');
    }
    return cells;
  });
  const t = table(head, rows, 'jp-DistTrainDetails-replicas');
  markCause(
    t,
    job.status.replicas.map(r => r.name),
    cause,
    peers
  );
  nameRows(
    t,
    'replica',
    job.status.replicas.map(r => r.name)
  );
  return [section('Replicas'), t];
}

function conditions({ status }: IJobDetail): HTMLElement[] {
  if (!status.conditions?.length) {
    return [];
  }
  const rows = status.conditions.map(c => [
    c.type,
    c.status,
    c.reason ?? '–',
    c.message ?? '–',
    formatTime(c.last_transition_time)
  ]);
  return [section('Conditions'), table(['Type', 'Status', 'Reason', 'Message', 'Since'], rows)];
}

function events({ status }: IJobDetail): HTMLElement[] {
  if (!status.events?.length) {
    return [];
  }
  const head = ['Time', 'Type', 'Reason', 'Object', 'Message', 'Count'];
  const rows = status.events.map(e => [
    formatTime(e.time),
    e.type,
    e.reason,
    e.object ?? '–',
    e.message,
    String(e.count)
  ]);
  return [section('Events'), table(head, rows, 'jp-DistTrainDetails-events')];
}

/** How far the job is (em's total, Lightning's max_steps, the rank-0 tqdm bar), and from what. */
function progress({ summary }: IJobDetail): HTMLElement[] {
  if (!summary.progress) {
    return [];
  }
  const { step, total, eta_seconds, source, label } = summary.progress;
  const bar = progressBar({ step, total_steps: total, eta_seconds });
  bar.classList.add('jp-DistTrainDetails-progress');
  bar.title = `from ${source}${label ? `: ${label}` : ''}`;
  return [section('Progress'), bar];
}

/** Every section, in the order the details show them. */
export const DETAILS_SECTIONS: readonly IDetailsSection[] = [
  { id: 'summary', render: summary },
  { id: 'progress', render: progress },
  { id: 'hours', render: hoursSection },
  {
    id: 'diagnosis',
    render: (job, { diagnosis }) => (diagnosis ? diagnosisSection(job, diagnosis) : [])
  },
  { id: 'spec', render: spec },
  { id: 'replicas', render: replicas },
  { id: 'values', render: keptValues },
  {
    id: 'resources',
    render: (_, { resources }) =>
      resources ? [section('Resources'), resourcesSection(resources)] : []
  },
  { id: 'conditions', render: conditions },
  { id: 'events', render: events }
];
