/**
 * The Runs view: every run of every job in one table (run, job, phase, status, one column per
 * hparam and per final metric), sorted by a click on a header, filtered by a text box, with
 * checkboxes to open the selected runs together in the all-jobs TensorBoard.
 */
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ALL_JOBS } from '../rest/client';
import { ComparePoints } from '../models/comparepoints';
import { formatMetric, formatTime, formatValue } from '../render/format';
import { CommandIDs } from '../ids';
import { phaseBadge } from '../render/dom';
import { showMoreLabel } from '../render/paging';
import { RunsCompare } from './runscompareview';
import { hoursCell } from './diagnosis';
import { runStatusBadge } from './runsection';
import { IRunColumn, runKey, runLabel, RunsTableModel } from '../models/runsmodel';
import type { IRunSummary } from '../rest/types';

/** The id of the Runs tab (one for the page). */
export const RUNS_VIEW_ID = 'jp-disttrain-runs';

const GROUPS: Record<IRunColumn['kind'], string> = {
  run: '',
  hparam: 'Hyper-parameters',
  metric: 'Metrics (last value)'
};

export class RunsView extends Widget {
  constructor(
    readonly model: RunsTableModel,
    private _commands: CommandRegistry,
    points: ComparePoints
  ) {
    super();
    this.addClass('jp-DistTrainRuns');
    this.title.label = 'Runs';
    this.title.caption = 'Every run of every distributed training job';

    const bar = document.createElement('div');
    bar.className = 'jp-DistTrainRuns-controls';
    this._filter = document.createElement('input');
    this._filter.type = 'search';
    this._filter.className = 'jp-DistTrainRuns-filter jp-mod-styled';
    this._filter.placeholder = 'Filter: run, job or hparam (lr=0.1)';
    this._filter.setAttribute('aria-label', 'Filter runs');
    this._filter.addEventListener('input', () => {
      this.model.filter = this._filter.value;
    });
    this._open = document.createElement('button');
    this._open.type = 'button';
    this._open.className = 'jp-DistTrainRuns-tensorboard jp-Button jp-mod-styled jp-mod-accept';
    this._open.textContent = 'Open in TensorBoard';
    this._open.addEventListener('click', () => this.openSelected());
    const all = document.createElement('label');
    all.className = 'jp-DistTrainRuns-allHparams';
    this._allHparams = document.createElement('input');
    this._allHparams.type = 'checkbox';
    this._allHparams.addEventListener('change', () => {
      this.model.allHparams = this._allHparams.checked;
    });
    this._allLabel = document.createElement('span');
    all.append(this._allHparams, this._allLabel);
    all.title = 'Show every hparam, not only those that differ among the selected runs';
    this._status = document.createElement('span');
    this._status.className = 'jp-DistTrainRuns-status';
    this._status.setAttribute('role', 'status');
    bar.append(this._filter, this._open, all, this._status);

    this._table = document.createElement('table');
    this._table.className = 'jp-DistTrainDetails-table jp-DistTrainRuns-table';
    const scroller = document.createElement('div');
    scroller.className = 'jp-DistTrainRuns-scroller';
    this._more = document.createElement('button');
    this._more.type = 'button';
    this._more.className = 'jp-DistTrainRuns-more jp-Button jp-mod-minimal';
    this._more.addEventListener('click', () => this.model.showMore());
    scroller.append(this._table, this._more);
    this.compare = new RunsCompare(model, points);
    this.node.append(bar, scroller, this.compare.node);

    model.changed.connect(this._render, this);
    this._render();
  }

  /** Open the all-jobs TensorBoard showing only the selected runs. */
  openSelected(): void {
    const runFilter = this.model.tensorboardFilter;
    if (runFilter) {
      void this._commands.execute(CommandIDs.tensorboard, { id: ALL_JOBS, runFilter });
    }
  }

  /** The selected runs in charts, under the table. */
  readonly compare: RunsCompare;

  dispose(): void {
    this.compare.dispose();
    this.model.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.poll.refresh();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.model.start();
  }

  private _render(): void {
    const { error, loaded, runs } = this.model;
    const rows = this.model.rows;
    const drawn = rows.slice(0, this.model.limit);
    const selected = this.model.selected;
    const inTensorBoard = selected.filter(r => r.tensorboard_run).length;
    this._open.disabled = inTensorBoard === 0;
    this._open.title = inTensorBoard
      ? `Show the ${inTensorBoard} selected run(s) in the TensorBoard of all jobs`
      : 'Select runs to compare them in TensorBoard';
    this._status.classList.toggle('jp-mod-error', !!error);
    this._status.textContent = error
      ? `Cannot load the runs: ${error}`
      : !loaded
        ? 'Loading runs…'
        : runs.length === 0
          ? 'No runs yet: call em.create_run(...) in a %%distrun cell'
          : `${rows.length} of ${runs.length} runs, ${selected.length} selected`;
    const hidden = this.model.hiddenHparams.size;
    this._allHparams.checked = this.model.allHparams;
    this._allLabel.textContent = `All hyper-parameters${hidden ? ` (${hidden} the same hidden)` : ''}`;

    const focused = document.activeElement as HTMLElement | null;
    const focusKey =
      focused && this._table.contains(focused) ? focused.dataset.focusKey : undefined;
    const columns = this.model.columns;
    const thead = document.createElement('thead');
    thead.append(this._groupRow(columns), this._headerRow(columns, rows));
    const tbody = document.createElement('tbody');
    tbody.append(...drawn.map(run => this._row(run, columns)));
    this._table.replaceChildren(thead, tbody);
    const more = rows.length - drawn.length;
    this._more.hidden = more === 0;
    this._more.textContent = showMoreLabel(more);
    if (focusKey) {
      this._table.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
    }
  }

  /** "Hyper-parameters" and "Metrics" above their columns. */
  private _groupRow(columns: readonly IRunColumn[]): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.className = 'jp-DistTrainRuns-groups';
    const cells: { kind: IRunColumn['kind']; span: number }[] = [{ kind: 'run', span: 1 }];
    for (const column of columns) {
      const lastCell = cells[cells.length - 1];
      if (lastCell.kind === column.kind) {
        lastCell.span++;
      } else {
        cells.push({ kind: column.kind, span: 1 });
      }
    }
    for (const cell of cells) {
      const th = document.createElement('th');
      th.colSpan = cell.span;
      th.textContent = GROUPS[cell.kind];
      th.className = `jp-mod-${cell.kind}`;
      tr.append(th);
    }
    return tr;
  }

  private _headerRow(
    columns: readonly IRunColumn[],
    rows: readonly IRunSummary[]
  ): HTMLTableRowElement {
    const tr = document.createElement('tr');
    const all = document.createElement('th');
    all.className = 'jp-DistTrainRuns-check';
    const box = checkbox('Select every run shown', 'all');
    box.checked = rows.length > 0 && rows.every(r => this.model.isSelected(r));
    box.indeterminate = !box.checked && rows.some(r => this.model.isSelected(r));
    box.addEventListener('change', () => this.model.selectShown(box.checked));
    all.append(box);
    tr.append(all);
    const sort = this.model.sort;
    for (const column of columns) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.className = `jp-mod-${column.kind}`;
      th.dataset.column = column.key;
      const sorted = sort?.key === column.key;
      th.setAttribute('aria-sort', sorted ? (sort.ascending ? 'ascending' : 'descending') : 'none');
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'jp-DistTrainRuns-sort';
      button.dataset.focusKey = `sort/${column.key}`;
      button.textContent = column.label + (sorted ? (sort.ascending ? ' ▲' : ' ▼') : '');
      button.title = `Sort by ${column.label}`;
      button.addEventListener('click', () => this.model.sortBy(column.key));
      th.append(button);
      tr.append(th);
    }
    return tr;
  }

  private _row(run: IRunSummary, columns: readonly IRunColumn[]): HTMLTableRowElement {
    const key = runKey(run);
    const tr = document.createElement('tr');
    tr.dataset.run = key;
    const selected = this.model.isSelected(run);
    tr.classList.toggle('jp-mod-selected', selected);
    const check = document.createElement('td');
    check.className = 'jp-DistTrainRuns-check';
    const box = checkbox(`Select ${run.run} of ${run.job_name}`, key);
    box.checked = selected;
    box.addEventListener('change', () => this.model.select(run, box.checked));
    check.append(box);
    tr.append(check);
    for (const column of columns) {
      const td = document.createElement('td');
      td.className = `jp-mod-${column.kind}`;
      td.dataset.column = column.key;
      td.append(this._cell(run, column));
      tr.append(td);
    }
    return tr;
  }

  private _cell(run: IRunSummary, column: IRunColumn): string | HTMLElement {
    const value = column.value(run);
    switch (column.key) {
      case 'run':
        return runLabel(run.run);
      case 'job':
        return this._jobLink(run);
      case 'phase':
        return phaseBadge(run.job_phase);
      case 'status':
        return runStatusBadge(run.status);
      case 'started':
        return formatTime(run.start_time);
      case 'step':
        return run.step === null
          ? '–'
          : `${run.step}${run.total_steps ? ` / ${run.total_steps}` : ''}`;
      case 'hours':
        return run.hours ? hoursCell(run.hours) : '–';
    }
    if (value === undefined) {
      return '';
    }
    return column.kind === 'metric' ? formatMetric(value) : formatValue(value);
  }

  /** The job's name, opening its details (where the run's charts and artifacts are). */
  private _jobLink(run: IRunSummary): HTMLElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'jp-DistTrainRuns-job';
    b.textContent = run.job_name;
    b.title = `Details of job ${run.job_id}`;
    b.dataset.focusKey = `job/${runKey(run)}`;
    b.addEventListener('click', () => {
      void this._commands.execute(CommandIDs.details, { id: run.job_id });
    });
    return b;
  }

  private _filter: HTMLInputElement;
  private _open: HTMLButtonElement;
  private _allHparams: HTMLInputElement;
  private _allLabel: HTMLSpanElement;
  private _status: HTMLSpanElement;
  private _table: HTMLTableElement;
  private _more: HTMLButtonElement;
}

function checkbox(label: string, focusKey: string): HTMLInputElement {
  const box = document.createElement('input');
  box.type = 'checkbox';
  box.setAttribute('aria-label', label);
  box.dataset.focusKey = `check/${focusKey}`;
  return box;
}
