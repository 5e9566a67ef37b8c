/**
 * The metric points of the runs compared in the Runs view: each selected run read to its end
 * (`since` = where the last read ended, so a refresh only reads what is new), kept while it is
 * selected. Reads never overlap: a request made during one is run once it ends.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { RunSeries } from './jobrunsmodel';
import { runKey } from './runcompare';
import { IRunDetail, IRunQuery, IRunSummary, TERMINAL_PHASES } from '../rest/types';

/** Pages read per run and load, so one huge run does not hold the others up. */
const PAGES_PER_LOAD = 10;

export type FetchRun = (job: string, run: string, query: IRunQuery) => Promise<IRunDetail>;

export class ComparePoints {
  constructor(private _fetch: FetchRun) {}

  /** The points of a run read so far (undefined before its first read). */
  get(run: IRunSummary): RunSeries | undefined {
    return this._series.get(runKey(run));
  }

  /** The last read error, cleared by the next success. */
  get error(): string | null {
    return this._error;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Read `runs` on (runs no longer asked for are dropped); resolves once read. */
  async load(runs: readonly IRunSummary[]): Promise<void> {
    this._wanted = [...runs];
    if (this._loading) {
      this._again = true;
      return this._loading;
    }
    this._loading = this._loadAll();
    try {
      await this._loading;
    } finally {
      this._loading = null;
    }
  }

  private async _loadAll(): Promise<void> {
    do {
      this._again = false;
      const runs = this._wanted;
      const keys = new Set(runs.map(runKey));
      for (const key of [...this._series.keys()]) {
        if (!keys.has(key)) {
          this._series.delete(key);
        }
      }
      try {
        for (const run of runs) {
          await this._readOn(run);
        }
        this._error = null;
      } catch (err) {
        this._error = err instanceof Error ? err.message : String(err);
      }
      this._changed.emit();
    } while (this._again);
  }

  private async _readOn(run: IRunSummary): Promise<void> {
    const key = runKey(run);
    let series = this._series.get(key);
    if (!series) {
      series = new RunSeries(run.job_id, run.run);
      this._series.set(key, series);
    }
    for (let page = 0; page < PAGES_PER_LOAD && !series.done; page++) {
      const ended = TERMINAL_PHASES.has(run.job_phase);
      const answer = await this._fetch(run.job_id, run.run, { since: series.next });
      series.add(answer);
      if (!answer.more) {
        series.done = ended; // a run of a job still running may get more points
        return;
      }
    }
  }

  dispose(): void {
    Signal.clearData(this);
  }

  private _series = new Map<string, RunSeries>();
  private _wanted: IRunSummary[] = [];
  private _loading: Promise<void> | null = null;
  private _again = false;
  private _error: string | null = null;
  private _changed = new Signal<this, void>(this);
}
