/**
 * One job's row in the sidebar: its name, phase and quiet badges, what it runs on and for how
 * long, its progress bar while it runs, why it ended, and its labelled actions. Plain DOM, drawn
 * anew on each redraw of the list; the `data-focus-key`s let the list put the focus back.
 */
import { deleteIcon, listIcon, stopIcon, LabIcon, textEditorIcon } from '@jupyterlab/ui-components';

import { CommandIDs } from '../ids';
import { chartIcon } from '../icons';
import { phaseBadge } from '../render/dom';
import { jobShape, jobTiming, quietNote } from '../render/format';
import { IJobSummary, TERMINAL_PHASES } from '../rest/types';
import { quietBadge } from './resourcesview';
import { guardBadge } from './diagnosis';
import { progressBar } from './runsection';

interface IAction {
  command: string;
  label: string;
  icon: LabIcon;
  when?: (job: IJobSummary) => boolean;
}

const ACTIONS: IAction[] = [
  { command: CommandIDs.details, label: 'Details', icon: listIcon },
  { command: CommandIDs.logs, label: 'Logs', icon: textEditorIcon },
  {
    command: CommandIDs.tensorboard,
    label: 'TensorBoard',
    icon: chartIcon,
    when: job => job.tensorboard // only where it wrote event files
  },
  {
    command: CommandIDs.cancel,
    label: 'Cancel',
    icon: stopIcon,
    when: job => !TERMINAL_PHASES.has(job.phase)
  },
  { command: CommandIDs.remove, label: 'Delete', icon: deleteIcon }
];

/** What a row needs of its list. */
export interface IJobRowContext {
  /** The clock (milliseconds) the timings are read against. */
  now: number;
  /** Whether this is the job the palette's job commands act on. */
  selected: boolean;
  /** Runs a command on a job (an action's button, a double click). */
  execute: (command: string, id: string) => void;
}

export function jobRow(job: IJobSummary, context: IJobRowContext): HTMLLIElement {
  const { now, selected, execute } = context;
  const li = document.createElement('li');
  li.className = 'jp-DistTrainPanel-job';
  li.tabIndex = 0;
  li.dataset.jobId = job.id;
  li.dataset.focusKey = `${job.id}/row`;
  li.setAttribute('aria-label', `${job.name} ${job.phase}`);
  li.title = job.id;
  li.classList.toggle('jp-mod-selected', selected);
  li.setAttribute('aria-current', String(selected));

  const top = document.createElement('div');
  top.className = 'jp-DistTrainPanel-jobTop';
  const name = document.createElement('span');
  name.className = 'jp-DistTrainPanel-name';
  name.textContent = job.name;
  top.append(name, phaseBadge(job.phase));
  if (job.guard) {
    top.append(guardBadge(job.guard));
  }
  const quiet = quietNote(job);
  if (quiet) {
    top.append(quietBadge(quiet));
    li.setAttribute('aria-label', `${job.name} ${job.phase}, quiet: ${quiet}`);
  }

  const meta = document.createElement('div');
  meta.className = 'jp-DistTrainPanel-meta';
  const parts = [
    job.backend,
    TERMINAL_PHASES.has(job.phase)
      ? `${job.replicas_total} replica${job.replicas_total === 1 ? '' : 's'}`
      : `${job.replicas_ready}/${job.replicas_total} ready`,
    job.gpus > 0 ? `${job.gpus} GPU${job.gpus === 1 ? '' : 's'}` : jobShape(job),
    jobTiming(job, now)
  ];
  meta.textContent = parts.filter(Boolean).join(' · ');
  li.append(top, meta);
  if (job.progress && job.phase === 'Running') {
    // em's run with a total, else the job's own tqdm bar (the server reads it off its log)
    const { step, total, eta_seconds } = job.progress;
    const bar = progressBar({ step, total_steps: total, eta_seconds });
    bar.classList.add('jp-DistTrainPanel-progress');
    bar.title = `from ${job.progress.source}${job.progress.label ? `: ${job.progress.label}` : ''}`;
    li.append(bar);
  }

  if (job.reason || job.message) {
    const why = document.createElement('div');
    why.className = 'jp-DistTrainPanel-reason';
    why.classList.toggle('jp-mod-failed', job.phase === 'Failed');
    why.textContent = [job.reason, job.message].filter(Boolean).join(': ');
    li.append(why);
  }

  const actions = document.createElement('div');
  actions.className = 'jp-DistTrainPanel-actions';
  for (const action of ACTIONS) {
    if (action.when && !action.when(job)) {
      continue;
    }
    const b = iconButton(
      action.icon,
      `${action.label} (${job.name})`,
      () => execute(action.command, job.id),
      action.label
    );
    b.dataset.action = action.label.toLowerCase();
    b.dataset.focusKey = `${job.id}/${action.command}`;
    actions.append(b);
  }
  li.append(actions);
  li.addEventListener('dblclick', () => {
    execute(CommandIDs.details, job.id);
  });
  return li;
}

/** A button with an icon; `text` is shown beside it where the panel is wide enough. */
export function iconButton(
  icon: LabIcon,
  label: string,
  onClick: () => void,
  text?: string
): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'jp-DistTrainPanel-iconButton jp-Button jp-mod-minimal';
  b.title = label;
  b.setAttribute('aria-label', label);
  icon.element({ container: b, elementPosition: 'center', tag: 'span' });
  if (text) {
    const span = document.createElement('span');
    span.className = 'jp-DistTrainPanel-actionLabel';
    span.textContent = text;
    b.append(span);
  }
  b.addEventListener('click', event => {
    event.stopPropagation();
    onClick();
  });
  return b;
}
