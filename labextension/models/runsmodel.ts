/**
 * The Runs view's model: every run of every job (one poll of `GET runs`), its columns (fixed
 * ones, then one per hparam and one per final metric), the filter, the sort and the selection.
 * The view only renders `rows` and `columns` and calls the setters.
 */
import { metricNumber } from '../render/format';
import { ROWS_PAGE } from '../render/paging';
import { IRunSummary, JOB_RUN, TERMINAL_PHASES } from '../rest/types';
import { IViewPollOptions, PollingModel } from './pollingmodel';
import { differingHparams, runKey } from './runcompare';

export type ColumnKind = 'run' | 'hparam' | 'metric';

export interface IRunColumn {
  /** Stable key: `run`, `job`, …, `hp:<name>` or `m:<type>/<name>`. */
  key: string;
  label: string;
  kind: ColumnKind;
  value: (run: IRunSummary) => unknown;
}

export { runKey };

const FIXED: IRunColumn[] = [
  { key: 'run', label: 'Run', kind: 'run', value: r => r.run },
  { key: 'job', label: 'Job', kind: 'run', value: r => r.job_name },
  { key: 'phase', label: 'Phase', kind: 'run', value: r => r.job_phase },
  { key: 'status', label: 'Status', kind: 'run', value: r => r.status },
  { key: 'started', label: 'Started', kind: 'run', value: r => r.start_time },
  { key: 'step', label: 'Step', kind: 'run', value: r => r.step },
  // what its job (and those it was resumed from) held: GPU- or core-hours, and their cost
  { key: 'hours', label: 'Hours', kind: 'run', value: r => r.hours?.allocated ?? null }
];

/** The fixed columns, then every hparam and every metric any run has, each sorted by name. */
export function runColumns(runs: readonly IRunSummary[]): IRunColumn[] {
  const hparams = new Set<string>();
  const metrics = new Set<string>();
  for (const run of runs) {
    Object.keys(run.hparams).forEach(k => hparams.add(k));
    Object.keys(run.metrics).forEach(k => metrics.add(k));
  }
  const byName = (a: string, b: string) => a.localeCompare(b);
  return [
    ...FIXED,
    ...[...hparams].sort(byName).map((name): IRunColumn => ({
      key: `hp:${name}`,
      label: name,
      kind: 'hparam',
      value: r => r.hparams[name]
    })),
    ...[...metrics].sort(byName).map((name): IRunColumn => ({
      key: `m:${name}`,
      label: name,
      kind: 'metric',
      value: r => r.metrics[name]
    }))
  ];
}

/** Rank of a cell for sorting: numbers (and NaN, infinities), then text, then empty cells. */
function sortClass(value: unknown): [number, number | string] {
  if (value === null || value === undefined || value === '') {
    return [3, 0];
  }
  if (
    typeof value === 'number' ||
    value === 'NaN' ||
    value === 'Infinity' ||
    value === '-Infinity'
  ) {
    const n = metricNumber(value);
    return Number.isNaN(n) ? [1, 0] : [0, n]; // NaN after every number, before text
  }
  if (typeof value === 'boolean') {
    return [0, value ? 1 : 0];
  }
  return [2, typeof value === 'string' ? value : JSON.stringify(value)];
}

/** Ascending order of two cells: numbers by value, text naturally ("run-2" < "run-10"). */
export function compareCells(a: unknown, b: unknown): number {
  const [ca, va] = sortClass(a);
  const [cb, vb] = sortClass(b);
  if (ca !== cb) {
    return ca - cb;
  }
  if (typeof va === 'number' && typeof vb === 'number') {
    return va === vb ? 0 : va < vb ? -1 : 1;
  }
  return String(va).localeCompare(String(vb), undefined, { numeric: true });
}

/** Whether every word of `text` is in the run's name, job, id, status or an hparam (`lr=0.1`). */
export function matchesFilter(run: IRunSummary, text: string): boolean {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) {
    return true;
  }
  const hay = [
    run.run,
    run.job_name,
    run.job_id,
    run.status,
    ...Object.entries(run.hparams).map(
      ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`
    )
  ]
    .join('\n')
    .toLowerCase();
  return words.every(w => hay.includes(w));
}

/** `s` with every character a regular expression gives a meaning escaped. */
export function escapeRegExp(s: string): string {
  return s.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');
}

/**
 * TensorBoard's run filter (its `runFilter` URL parameter, a case-insensitive regex searched
 * in each run's name) that shows exactly the runs at `paths` and, for a run every rank
 * recorded, its `rank-N` runs below; and every run below each of `dirs` (a job's whole
 * TensorBoard dir). Anchored at both ends so `a/run-1` does not show `a/run-10`.
 */
export function tensorboardRunFilter(
  paths: readonly string[],
  dirs: readonly string[] = []
): string {
  const any = (items: readonly string[]) => [...new Set(items)].sort().map(escapeRegExp).join('|');
  const parts = [];
  if (paths.length) {
    parts.push(`^(?:${any(paths)})(?:/rank-\\d+)?$`);
  }
  if (dirs.length) {
    parts.push(`^(?:${any(dirs)})(?:/.*)?$`);
  }
  return parts.join('|');
}

/** How a run is named on screen: the `JOB_RUN` of a job without a run of `em` says so. */
export function runLabel(run: string): string {
  return run === JOB_RUN ? '(job)' : run;
}

/** How much slower the table is refreshed while no job runs. */
const IDLE_FACTOR = 5;

export interface ISort {
  key: string;
  ascending: boolean;
}

/** How the table is shown: the filter's text, and whether every hparam has its column. */
interface IRunsTableView {
  filter: string;
  allHparams: boolean;
}

export interface IRunsTableModelOptions extends IViewPollOptions {
  /** Loads every run; `listRuns` in the extension. */
  fetchRuns: () => Promise<IRunSummary[]>;
}

export class RunsTableModel extends PollingModel<IRunSummary[]> {
  constructor(options: IRunsTableModelOptions) {
    super('jupyter_disttrain:runs', options, 60 * 1000);
    this._fetch = options.fetchRuns;
    this._interval = options.interval ?? 2000;
    // first of the slots, so every view reads what changed
    this.changed.connect(() => (this._hidden = null));
  }

  /** Every run, in the server's order (newest job first). */
  get runs(): readonly IRunSummary[] {
    return this._runs;
  }

  /**
   * The columns shown: every hparam with `allHparams`, else only those that differ among the
   * runs compared (the selected ones when two or more are, else the rows shown), so the
   * metrics stay in view.
   */
  get columns(): readonly IRunColumn[] {
    const hidden = this.hiddenHparams;
    return hidden.size ? this._columns.filter(c => !hidden.has(c.key)) : this._columns;
  }

  /** The keys (`hp:<name>`) of the hparam columns hidden because every compared run agrees. */
  get hiddenHparams(): Set<string> {
    // once per change: a render asks several times, and 1,000 runs make each ask count
    if (!this._hidden) {
      const selected = this.selected;
      const compared =
        selected.length >= 2
          ? selected
          : this._runs.filter(r => matchesFilter(r, this._view.filter));
      const differ = differingHparams(compared);
      this._hidden =
        this._view.allHparams || compared.length < 2
          ? new Set()
          : new Set(
              this._columns.filter(c => c.kind === 'hparam' && !differ.has(c.label)).map(c => c.key)
            );
    }
    return this._hidden;
  }

  /** Whether every hparam has its column, the same in every run or not. */
  get allHparams(): boolean {
    return this._view.allHparams;
  }

  set allHparams(on: boolean) {
    this._setView('allHparams', on);
  }

  /** The runs the filter lets through, in the chosen order. */
  get rows(): readonly IRunSummary[] {
    const shown = this._runs.filter(r => matchesFilter(r, this._view.filter));
    const sort = this._sort;
    const column = sort && this._columns.find(c => c.key === sort.key);
    if (!sort || !column) {
      return shown;
    }
    const sign = sort.ascending ? 1 : -1;
    // a stable sort: equal cells keep the server's order
    return shown
      .map((run, i) => ({ run, i }))
      .sort((a, b) => sign * compareCells(column.value(a.run), column.value(b.run)) || a.i - b.i)
      .map(x => x.run);
  }

  /**
   * How many of `rows` are drawn, the first ones (1,000 drawn rows take seconds); ticked runs
   * past them stay ticked and compared (`selected` is every ticked run).
   */
  get limit(): number {
    return this._limit;
  }

  /** Draw `ROWS_PAGE` more rows. */
  showMore(): void {
    this._limit += ROWS_PAGE;
    this.emitChanged();
  }

  get filter(): string {
    return this._view.filter;
  }

  set filter(text: string) {
    this._setView('filter', text);
  }

  /** Change how the table is shown (a change is announced, the same value is not). */
  private _setView<K extends keyof IRunsTableView>(key: K, value: IRunsTableView[K]): void {
    if (value !== this._view[key]) {
      this._view[key] = value;
      this.emitChanged();
    }
  }

  get sort(): ISort | null {
    return this._sort;
  }

  /** Sort by `key`, ascending; by the same key again, the other way. */
  sortBy(key: string): void {
    const same = this._sort?.key === key;
    this._sort = { key, ascending: same ? !this._sort!.ascending : true };
    this.emitChanged();
  }

  isSelected(run: IRunSummary): boolean {
    return this._selected.has(runKey(run));
  }

  select(run: IRunSummary, on: boolean): void {
    const key = runKey(run);
    if (on !== this._selected.has(key)) {
      this._mark(key, on);
      this.emitChanged();
    }
  }

  /** Select (or unselect) every run the filter shows. */
  selectShown(on: boolean): void {
    for (const run of this.rows) {
      this._mark(runKey(run), on);
    }
    this.emitChanged();
  }

  private _mark(key: string, on: boolean): void {
    if (on) {
      this._selected.add(key);
    } else {
      this._selected.delete(key);
    }
  }

  /** The selected runs (selected runs the filter hides included), in the server's order. */
  get selected(): IRunSummary[] {
    return this._runs.filter(r => this._selected.has(runKey(r)));
  }

  /** The TensorBoard filter of the selected runs, or null when none is in TensorBoard. */
  get tensorboardFilter(): string | null {
    const shown = this.selected.filter(r => r.tensorboard_run);
    const path = (r: IRunSummary) => r.tensorboard_run!;
    const dirs = shown.filter(r => r.run === JOB_RUN).map(path);
    const paths = shown.filter(r => r.run !== JOB_RUN).map(path);
    return shown.length ? tensorboardRunFilter(paths, dirs) : null;
  }

  /** Whether a job is still running (its runs may still change). */
  get active(): boolean {
    return this._runs.some(r => !TERMINAL_PHASES.has(r.job_phase));
  }

  /** Replace the runs; a selected run that is gone is unselected. */
  set(runs: IRunSummary[]): void {
    this.take(runs);
  }

  protected fetch(): Promise<IRunSummary[]> {
    return this._fetch();
  }

  protected apply(runs: IRunSummary[]): void {
    this._runs = runs;
    this._columns = runColumns(runs);
    const keys = new Set(runs.map(runKey));
    this._selected = new Set([...this._selected].filter(k => keys.has(k)));
    // with every job ended only a new job changes the table: look for one less often
    this.pace(this.active ? this._interval : this._interval * IDLE_FACTOR);
  }

  private _fetch: () => Promise<IRunSummary[]>;
  private _interval: number;
  private _runs: IRunSummary[] = [];
  private _columns: IRunColumn[] = runColumns([]);
  private _view: IRunsTableView = { filter: '', allHparams: false };
  private _hidden: Set<string> | null = null;
  private _sort: ISort | null = null;
  private _limit = ROWS_PAGE;
  private _selected = new Set<string>();
}
