/**
 * The left sidebar: every job, newest first, with its phase, replicas, GPUs and timing,
 * and one row of actions. Rendering is plain DOM, redrawn from the model on each change;
 * keyboard focus is kept across redraws by job id and action.
 */
import { CommandRegistry } from '@lumino/commands';
import {
  deleteIcon,
  listIcon,
  refreshIcon,
  stopIcon,
  LabIcon,
  tableRowsIcon,
  textEditorIcon
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ALL_JOBS, IJobSummary, searchedRoots, TERMINAL_PHASES } from './api';
import { CommandIDs, SIDEBAR_ID } from './ids';
import { jobShape, jobTiming, quietNote } from './format';
import { chartIcon, disttrainIcon } from './icons';
import { JobsModel } from './model';
import { quietBadge } from './resourcesview';
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

export class JobsPanel extends Widget {
  constructor(
    readonly model: JobsModel,
    private _commands: CommandRegistry
  ) {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('jp-DistTrainPanel');
    this.title.icon = disttrainIcon;
    this.title.caption = 'Distributed training jobs';

    const header = document.createElement('div');
    header.className = 'jp-DistTrainPanel-header';
    const h = document.createElement('h2');
    h.textContent = 'Distributed training';
    const refresh = this._button(refreshIcon, 'Refresh the job list', () => {
      void this.model.poll.refresh();
    });
    refresh.classList.add('jp-DistTrainPanel-refresh');
    const tbAll = this._button(chartIcon, 'TensorBoard for all jobs', () => {
      void this._commands.execute(CommandIDs.tensorboard, { id: ALL_JOBS });
    });
    const runs = this._button(tableRowsIcon, 'Runs of every job', () => {
      void this._commands.execute(CommandIDs.runs);
    });
    runs.classList.add('jp-DistTrainPanel-runs');
    header.append(h, runs, tbAll, refresh);

    this._status = document.createElement('div');
    this._status.className = 'jp-DistTrainPanel-status';
    this._status.setAttribute('role', 'status');
    this._list = document.createElement('ul');
    this._list.className = 'jp-DistTrainPanel-list';
    this._list.setAttribute('aria-label', 'Jobs');
    this.node.append(header, this._status, this._list);
    this.node.addEventListener('keydown', this._onKey);

    model.changed.connect(this._render, this);
    this._clock = window.setInterval(() => this._render(), 1000);
    this._render();
  }

  dispose(): void {
    window.clearInterval(this._clock);
    this.model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _button(icon: LabIcon, label: string, onClick: () => void): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'jp-DistTrainPanel-iconButton jp-Button jp-mod-minimal';
    b.title = label;
    b.setAttribute('aria-label', label);
    icon.element({ container: b, elementPosition: 'center', tag: 'span' });
    b.addEventListener('click', event => {
      event.stopPropagation();
      onClick();
    });
    return b;
  }

  private _render(): void {
    if (!this.isVisible && this._list.childElementCount > 0) {
      return; // redrawn when shown (onAfterShow)
    }
    const { jobs, error, loaded } = this.model;
    this._status.textContent = error
      ? `Cannot load jobs: ${error}`
      : !loaded
        ? 'Loading jobs…'
        : jobs.length === 0
          ? `No jobs yet${inRoots(searchedRoots())}. Run a cell with %%distrun --gpus 2 to start one.`
          : '';
    this._status.classList.toggle('jp-mod-error', !!error);

    const focused = document.activeElement as HTMLElement | null;
    const focusKey = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    const now = Date.now();
    const items = jobs.map(job => this._row(job, now));
    this._list.replaceChildren(...items);
    if (focusKey) {
      const again = this._list.querySelector<HTMLElement>(
        `[data-focus-key="${CSS.escape(focusKey)}"]`
      );
      again?.focus();
    }
  }

  private _row(job: IJobSummary, now: number): HTMLLIElement {
    const li = document.createElement('li');
    li.className = 'jp-DistTrainPanel-job';
    li.tabIndex = 0;
    li.dataset.jobId = job.id;
    li.dataset.focusKey = `${job.id}/row`;
    li.setAttribute('aria-label', `${job.name} ${job.phase}`);
    li.title = job.id;

    const top = document.createElement('div');
    top.className = 'jp-DistTrainPanel-jobTop';
    const name = document.createElement('span');
    name.className = 'jp-DistTrainPanel-name';
    name.textContent = job.name;
    top.append(name, phaseBadge(job.phase));
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
      const b = this._button(action.icon, `${action.label} (${job.name})`, () => {
        void this._commands.execute(action.command, { id: job.id });
      });
      b.dataset.action = action.label.toLowerCase();
      b.dataset.focusKey = `${job.id}/${action.command}`;
      actions.append(b);
    }
    li.append(actions);
    li.addEventListener('dblclick', () => {
      void this._commands.execute(CommandIDs.details, { id: job.id });
    });
    return li;
  }

  /** Arrow keys move between jobs; Enter opens details, Delete asks to delete. */
  private _onKey = (event: KeyboardEvent): void => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('.jp-DistTrainPanel-job');
    if (!row || event.target !== row) {
      return;
    }
    const id = row.dataset.jobId!;
    if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      const next = (
        event.key === 'ArrowDown' ? row.nextElementSibling : row.previousElementSibling
      ) as HTMLElement | null;
      next?.focus();
      event.preventDefault();
    } else if (event.key === 'Enter') {
      void this._commands.execute(CommandIDs.details, { id });
      event.preventDefault();
    } else if (event.key === 'Delete') {
      void this._commands.execute(CommandIDs.remove, { id });
      event.preventDefault();
    }
  };

  protected onAfterShow(): void {
    this._render();
    void this.model.poll.refresh();
  }

  private _status: HTMLDivElement;
  private _list: HTMLUListElement;
  private _clock: number;
}

/** A coloured phase badge (colours from the theme, see base.css). */
export function phaseBadge(phase: string): HTMLSpanElement {
  const badge = document.createElement('span');
  badge.className = `jp-DistTrain-badge jp-DistTrain-phase-${phase.toLowerCase()}`;
  badge.textContent = phase;
  return badge;
}

/** " in /a or /b": where an empty listing looked (nothing when the server did not say). */
function inRoots(roots: readonly string[]): string {
  return roots.length ? ` in ${roots.join(' or ')}` : '';
}
