/**
 * The left sidebar: every job, newest first, with its phase, replicas, GPUs and timing,
 * and one row of labelled actions; a filter box, and ended jobs older than a setting folded
 * behind an "N older jobs" toggle; below them, the sections given (the warm pools). A click or focus selects a job (what the palette's job
 * commands act on). Rendering is plain DOM, redrawn from the model on each change;
 * keyboard focus is kept across redraws by job id and action.
 */
import { CommandRegistry } from '@lumino/commands';
import { refreshIcon, tableRowsIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ALL_JOBS, IJobSummary, searchedRoots } from '../rest/client';
import { CommandIDs, SIDEBAR_ID } from '../ids';
import { chartIcon, disttrainIcon } from '../icons';
import { filterJobs, foldJobs } from '../models/joblist';
import { JobsModel } from '../models/jobsmodel';
import { ROWS_PAGE, showMoreLabel } from '../render/paging';
import { iconButton, jobRow } from './jobrow';

export class JobsPanel extends Widget {
  /**
   * @param foldHours ended jobs that ended longer ago than this many hours are folded (0: none)
   */
  constructor(
    readonly model: JobsModel,
    private _commands: CommandRegistry,
    private _foldHours: () => number = () => 0,
    sections: readonly { node: HTMLElement }[] = []
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
    const refresh = iconButton(refreshIcon, 'Refresh the job list', () => {
      void this.model.poll.refresh();
    });
    refresh.classList.add('jp-DistTrainPanel-refresh');
    const tbAll = iconButton(chartIcon, 'TensorBoard for all jobs', () => {
      void this._commands.execute(CommandIDs.tensorboard, { id: ALL_JOBS });
    });
    const runs = iconButton(tableRowsIcon, 'Runs of every job', () => {
      void this._commands.execute(CommandIDs.runs);
    });
    runs.classList.add('jp-DistTrainPanel-runs');
    header.append(h, runs, tbAll, refresh);

    this._status = document.createElement('div');
    this._status.className = 'jp-DistTrainPanel-status';
    this._status.setAttribute('role', 'status');
    this._filter = document.createElement('input');
    this._filter.type = 'search';
    this._filter.className = 'jp-DistTrainPanel-filter jp-mod-styled';
    this._filter.placeholder = 'Filter jobs';
    this._filter.setAttribute('aria-label', 'Filter jobs by id, name, phase or backend');
    this._filter.addEventListener('input', () => this._render());
    this._list = document.createElement('ul');
    this._list.className = 'jp-DistTrainPanel-list';
    this._list.setAttribute('aria-label', 'Jobs');
    this._folded = document.createElement('ul');
    this._folded.className = 'jp-DistTrainPanel-list jp-DistTrainPanel-folded';
    this._folded.setAttribute('aria-label', 'Older jobs');
    this._more = document.createElement('button');
    this._more.type = 'button';
    this._more.className = 'jp-DistTrainPanel-more jp-Button jp-mod-minimal';
    this._more.addEventListener('click', () => {
      this._limit += ROWS_PAGE;
      this._render();
    });
    this._foldToggle = document.createElement('button');
    this._foldToggle.type = 'button';
    this._foldToggle.className = 'jp-DistTrainPanel-foldToggle jp-Button jp-mod-minimal';
    this._foldToggle.addEventListener('click', () => {
      this._showFolded = !this._showFolded;
      this._render();
    });
    this.node.append(header, this._filter, this._status, this._list);
    this.node.append(this._more, this._foldToggle, this._folded);
    this.node.append(...sections.map(s => s.node)); // below the jobs: the warm pools
    this.node.addEventListener('keydown', this._onKey);
    this.node.addEventListener('focusin', this._onFocus);
    this.node.addEventListener('click', this._onFocus);

    model.changed.connect(this._render, this);
    model.selectionChanged.connect(this._markSelected, this);
    this._clock = window.setInterval(() => this._render(), 1000);
    this._render();
  }

  dispose(): void {
    window.clearInterval(this._clock);
    this.model.changed.disconnect(this._render, this);
    this.model.selectionChanged.disconnect(this._markSelected, this);
    super.dispose();
  }

  private _render(): void {
    if (!this.isVisible && this._list.childElementCount > 0) {
      return; // redrawn when shown (onAfterShow)
    }
    const { jobs, error, loaded } = this.model;
    const query = this._filter.value.trim();
    const matching = filterJobs(jobs, query);
    // a search looks through every job: nothing is folded then
    const { shown, folded } = query
      ? { shown: matching, folded: [] }
      : foldJobs(matching, this._foldHours());
    this._status.textContent = error
      ? `Cannot load jobs: ${error}`
      : !loaded
        ? 'Loading jobs…'
        : jobs.length === 0
          ? `No jobs yet${inRoots(searchedRoots())}. Run a cell with %%distrun --gpus 2 to start one.`
          : matching.length === 0
            ? `No job matches "${query}".`
            : '';
    this._status.classList.toggle('jp-mod-error', !!error);

    const focused = document.activeElement as HTMLElement | null;
    const focusKey = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    const now = Date.now();
    // the newest first, ROWS_PAGE at a time: a long list costs its redraws only when asked for
    this._list.replaceChildren(...shown.slice(0, this._limit).map(job => this._row(job, now)));
    const more = shown.length - Math.min(shown.length, this._limit);
    this._more.hidden = more === 0;
    this._more.textContent = showMoreLabel(more);
    const n = folded.length;
    this._foldToggle.hidden = n === 0;
    this._foldToggle.textContent = this._showFolded
      ? `Hide ${n} older job${n === 1 ? '' : 's'}`
      : `${n} older job${n === 1 ? '' : 's'}`;
    this._foldToggle.title = `Jobs that ended more than ${this._foldHours()} h ago (Settings: Distributed Training)`;
    this._foldToggle.setAttribute('aria-expanded', String(this._showFolded));
    this._folded.replaceChildren(
      ...(this._showFolded ? folded.map(job => this._row(job, now)) : [])
    );
    if (focusKey) {
      const again = this.node.querySelector<HTMLElement>(
        `[data-focus-key="${CSS.escape(focusKey)}"]`
      );
      again?.focus();
    }
  }

  private _row(job: IJobSummary, now: number): HTMLLIElement {
    return jobRow(job, {
      now,
      selected: this.model.selected?.id === job.id,
      execute: (command, id) => void this._commands.execute(command, { id })
    });
  }

  /**
   * Mark the selected row. Only classes change: redrawing the rows here would replace a
   * button between its mousedown (which focuses, hence selects) and its mouseup, and the
   * click would be lost.
   */
  private _markSelected(): void {
    const id = this.model.selected?.id;
    for (const li of Array.from(
      this.node.querySelectorAll<HTMLElement>('.jp-DistTrainPanel-job')
    )) {
      const selected = li.dataset.jobId === id;
      li.classList.toggle('jp-mod-selected', selected);
      li.setAttribute('aria-current', String(selected));
    }
  }

  /** A job's row (or one of its buttons) got focus or a click: that job is the selected one. */
  private _onFocus = (event: Event): void => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('.jp-DistTrainPanel-job');
    if (row?.dataset.jobId) {
      this.model.select(row.dataset.jobId);
    }
  };

  /** Arrows move between jobs (folded too when shown); Enter opens details, Delete deletes. */
  private _onKey = (event: KeyboardEvent): void => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('.jp-DistTrainPanel-job');
    if (!row || event.target !== row) {
      return;
    }
    const id = row.dataset.jobId!;
    if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      const rows = Array.from(this.node.querySelectorAll<HTMLElement>('.jp-DistTrainPanel-job'));
      const next = rows[rows.indexOf(row) + (event.key === 'ArrowDown' ? 1 : -1)];
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

  protected onUpdateRequest(): void {
    this._render(); // a setting changed (the fold threshold)
  }

  protected onAfterShow(): void {
    this._render();
    void this.model.poll.refresh();
  }

  private _status: HTMLDivElement;
  private _filter: HTMLInputElement;
  private _list: HTMLUListElement;
  private _folded: HTMLUListElement;
  private _foldToggle: HTMLButtonElement;
  private _more: HTMLButtonElement;
  private _limit = ROWS_PAGE;
  private _showFolded = false;
  private _clock: number;
}

/** " in /a or /b": where an empty listing looked (nothing when the server did not say). */
function inRoots(roots: readonly string[]): string {
  return roots.length ? ` in ${roots.join(' or ')}` : '';
}
