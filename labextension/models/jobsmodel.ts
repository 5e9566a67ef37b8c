/**
 * The job list shared by the sidebar, the commands and the notifications: one poll of
 * `GET jobs`, with backoff on errors, a slow pace while nobody looks and nothing runs, and
 * standby while the browser tab is hidden.
 */
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { IJobSummary, TERMINAL_PHASES } from '../rest/types';
import { PollingModel } from './pollingmodel';

export interface IPhaseChange {
  job: IJobSummary;
  previous: string;
}

export interface IJobsModelOptions {
  /** Loads the job list (newest first); `listJobs` in the extension. */
  fetchJobs: () => Promise<IJobSummary[]>;
  /** Milliseconds between refreshes while someone looks or a job runs. */
  interval?: number;
  /** Milliseconds between refreshes while idle (still polled: a cell may start a job). */
  idleInterval?: number;
  /**
   * Whether nobody is looking; with no job running, poll slowly. Defaults to "views were
   * registered with `watch` and none is visible" (no view registered: always watched).
   */
  unwatched?: () => boolean;
  /** The clock (milliseconds), to tell a job that just ended from one found ended long ago. */
  now?: () => number;
}

/**
 * How long ago a job may have ended and still be news when it first shows in a loaded list (one
 * submitted and ended between two polls); older ones (a job root found later) are not.
 */
export const RECENT_END_MS = 10 * 60 * 1000;

export class JobsModel extends PollingModel<IJobSummary[]> {
  constructor(options: IJobsModelOptions) {
    // standby only while the browser tab is hidden: a cell may start a job any time
    super('jupyter_disttrain:jobs', { interval: options.interval }, 60 * 1000);
    this._fetch = options.fetchJobs;
    this._now = options.now ?? Date.now;
    this._interval = options.interval ?? 2000;
    this._idleInterval = Math.max(this._interval, options.idleInterval ?? 10000);
    this._unwatched =
      options.unwatched ??
      (() => this._watchers.length > 0 && !this._watchers.some(visible => visible()));
  }

  /** Jobs, newest first. */
  get jobs(): readonly IJobSummary[] {
    return this._jobs;
  }

  /** A job went from a non-terminal phase to a terminal one while we watched. */
  get finished(): ISignal<this, IPhaseChange> {
    return this._finished;
  }

  /** Register a view of the jobs (e.g. the sidebar); while any says it is visible, poll briskly. */
  /** Returns the function that ends the registration. */
  watch(visible: () => boolean): () => void {
    this._watchers.push(visible);
    return () => {
      this._watchers = this._watchers.filter(w => w !== visible);
    };
  }

  /** The job picked in the jobs panel (what the palette's job commands act on), while listed. */
  get selected(): IJobSummary | undefined {
    return this._selected === null ? undefined : this.find(this._selected);
  }

  /** A job was picked in the jobs panel (or none). */
  get selectionChanged(): ISignal<this, string | null> {
    return this._selectionChanged;
  }

  select(id: string | null): void {
    if (id !== this._selected) {
      this._selected = id;
      this._selectionChanged.emit(id);
    }
  }

  find(id: string): IJobSummary | undefined {
    return this._jobs.find(j => j.id === id);
  }

  setInterval(ms: number): void {
    this._interval = ms;
    this._idleInterval = Math.max(ms, this._idleInterval);
    this._pace();
  }

  /** Whether the model polls at the slow, idle pace (nobody looks, nothing runs). */
  get idle(): boolean {
    return this._unwatched() && this._jobs.every(j => TERMINAL_PHASES.has(j.phase));
  }

  private _pace(): void {
    this.pace(this.idle ? this._idleInterval : this._interval);
  }

  /** Replace the list, emitting `finished` for each job that just reached its end. */
  set(jobs: IJobSummary[]): void {
    this.take(jobs);
  }

  protected fetch(): Promise<IJobSummary[]> {
    return this._fetch();
  }

  protected apply(jobs: IJobSummary[]): void {
    this._jobs = [...jobs].sort((a, b) => (b.created ?? '').localeCompare(a.created ?? ''));
    this._pace();
  }

  /** After the views were told of the new list, the news: the jobs that just ended. */
  protected take(jobs: IJobSummary[]): void {
    const before = new Map(this._jobs.map(j => [j.id, j.phase as string]));
    const wasLoaded = this.loaded;
    super.take(jobs);
    for (const job of this._jobs) {
      const previous = before.get(job.id);
      const knownRunning = previous !== undefined && !TERMINAL_PHASES.has(previous);
      // a job first seen already finished (page load) is not news; one submitted and finished
      // between two polls is, once the list was loaded (but not one that ended long ago).
      const newAndDone = previous === undefined && wasLoaded && this._endedRecently(job);
      if (TERMINAL_PHASES.has(job.phase) && (knownRunning || newAndDone)) {
        this._finished.emit({ job, previous: previous ?? 'Pending' });
      }
    }
  }

  private _endedRecently(job: IJobSummary): boolean {
    const at = Date.parse(job.finish_time ?? job.created ?? '');
    return Number.isNaN(at) || this._now() - at < RECENT_END_MS;
  }

  private _fetch: () => Promise<IJobSummary[]>;
  private _now: () => number;
  private _interval: number;
  private _idleInterval: number;
  private _unwatched: () => boolean;
  private _watchers: (() => boolean)[] = [];
  private _jobs: IJobSummary[] = [];
  private _finished = new Signal<this, IPhaseChange>(this);
  private _selected: string | null = null;
  private _selectionChanged = new Signal<this, string | null>(this);
}

/** The one job list of the page, shared by the sidebar, the commands and the notifications. */
export const IJobsModel = new Token<JobsModel>(
  'jupyter_disttrain:IJobsModel',
  'The job list of the Jupyter server, polled while someone looks or a job runs.'
);
