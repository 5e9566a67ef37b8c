/**
 * The runs of one job for its details view: each run's record, progress, artifacts and metric
 * series. Points are read incrementally (`since` = the byte offset the last answer ended at)
 * while the job runs; once it has ended, each run is read to its end and the poll stops.
 * Each series keeps a bounded number of points (halved, keeping its marked points, when full).
 */
import { metricNumber } from '../render/format';
import { IRunDetail, IRunPoint, IRunQuery, IRunSummary, TERMINAL_PHASES } from '../rest/types';
import { IJobPollingModelOptions, JobPollingModel } from './pollingmodel';

/** Points kept per series (a chart is a few hundred pixels wide). */
export const MAX_SERIES_POINTS = 2000;
/** Run statuses after which a run gets no more points (unless it is continued). */
const ENDED_RUN = new Set(['finished', 'failed']);
/** Pages read per run and refresh, so one huge run does not hold the others up. */
const PAGES_PER_REFRESH = 10;

/** Whether a point is one the chart marks (a step that went back, NaN or an infinity). */
export function isMarked(point: IRunPoint): boolean {
  return point.flags.length > 0 || !Number.isFinite(metricNumber(point.value));
}

/**
 * `points` thinned to at most `max`: every other point goes, except the marked ones and
 * the last, until it fits (the shape stays, memory stays bounded however long the run).
 */
export function thin(points: IRunPoint[], max: number): IRunPoint[] {
  let out = points;
  while (out.length > max) {
    const before = out.length;
    out = out.filter((p, i) => i % 2 === 0 || i === before - 1 || isMarked(p));
    if (out.length === before) {
      return out.slice(out.length - max); // all marked: the newest
    }
  }
  return out;
}

/** One run as its details show it. */
export class RunSeries {
  constructor(
    readonly jobId: string,
    readonly run: string
  ) {}

  /** `<type>/<name>` → its points, oldest first, in the order they were logged. */
  readonly series = new Map<string, IRunPoint[]>();
  /** The last answer (record, progress, artifacts); null before the first. */
  detail: IRunDetail | null = null;
  /** The byte offset to read on from. */
  next = 0;
  /** Whether every point is read and the run will not change (its job has ended). */
  done = false;

  /** Take a page of the run: its points appended to their series, the rest replaced. */
  add(page: IRunDetail, max: number = MAX_SERIES_POINTS): void {
    this.detail = page;
    this.next = page.next;
    for (const point of page.points) {
      const key = `${point.type}/${point.name}`;
      let points = this.series.get(key);
      if (!points) {
        points = [];
        this.series.set(key, points);
      }
      points.push(point);
      if (points.length > max) {
        this.series.set(key, thin(points, Math.floor(max / 2)));
      }
    }
  }
}

export interface IJobRunsModelOptions extends IJobPollingModelOptions {
  /** Lists the job's runs; `listRuns` in the extension. */
  fetchRuns: (job: string) => Promise<IRunSummary[]>;
  /** A page of a run; `getRun` in the extension. */
  fetchRun: (job: string, run: string, query: IRunQuery) => Promise<IRunDetail>;
}

/** One read: the runs as listed, and whether their job had ended before their points were read. */
interface IRunsRead {
  runs: IRunSummary[];
  jobEnded: boolean;
}

export class JobRunsModel extends JobPollingModel<IRunsRead> {
  constructor(private _options: IJobRunsModelOptions) {
    super('runs', _options);
  }

  /** The job's runs as last listed (their summary), in the server's order. */
  get runs(): readonly IRunSummary[] {
    return this._runs;
  }

  /** The series of a listed run. */
  get(run: string): RunSeries | undefined {
    return this._series.get(run);
  }

  /** Whether the job has ended and every run was read to its end (nothing more to poll). */
  get ended(): boolean {
    return this._ended;
  }

  get done(): boolean {
    return this._ended;
  }

  /**
   * Say the job has ended (its details know): a job with no run then stops being polled
   * after one more listing (the runs' own summaries say it for a job that has some).
   */
  markJobEnded(): void {
    this._jobEndedSeen = true;
  }

  /** List the runs and read on in each (their points go straight into their series). */
  protected async fetch(): Promise<IRunsRead> {
    const runs = await this._options.fetchRuns(this.jobId);
    // the phase before the reads: a run is done only if read to its end after the job ended
    const jobEnded = runs.length ? TERMINAL_PHASES.has(runs[0].job_phase) : this._jobEndedSeen;
    for (const summary of runs) {
      let series = this._series.get(summary.run);
      if (!series) {
        series = new RunSeries(this.jobId, summary.run);
        this._series.set(summary.run, series);
      }
      if (series.done && !jobEnded && summary.status === 'running') {
        series.done = false; // a run continued under its name (a torchrun restart)
      }
      if (!series.done) {
        await this._readOn(series, jobEnded);
      }
    }
    return { runs, jobEnded };
  }

  protected apply({ runs, jobEnded }: IRunsRead): void {
    this._runs = runs;
    this._ended = jobEnded && runs.every(r => this._series.get(r.run)?.done);
  }

  private async _readOn(series: RunSeries, jobEnded: boolean): Promise<void> {
    for (let page = 0; page < PAGES_PER_REFRESH; page++) {
      const answer = await this._options.fetchRun(this.jobId, series.run, {
        since: series.next
      });
      series.add(answer);
      if (!answer.more) {
        // read to its end: nothing more comes once the job or the run itself has ended
        series.done = jobEnded || ENDED_RUN.has(answer.status);
        return;
      }
    }
  }

  private _runs: IRunSummary[] = [];
  private _series = new Map<string, RunSeries>();
  private _ended = false;
  private _jobEndedSeen = false;
}
