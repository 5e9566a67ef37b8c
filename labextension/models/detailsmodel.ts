/**
 * The job details view's model: one job's detail, polled until it ends, and its packaged
 * script, loaded once. Like `JobsModel`, it owns the fetching and the view only renders.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { IViewPollOptions, viewPoll } from './viewpoll';

import { IJobDetail, TERMINAL_PHASES } from '../rest/types';

export interface IPackagedScript {
  /** File name of the entry point (e.g. `train.py`). */
  name: string;
  text: string;
}

export interface IJobDetailsModelOptions extends IViewPollOptions {
  jobId: string;
  /** Loads the job's detail; `getJob` in the extension. */
  fetchJob: (id: string) => Promise<IJobDetail>;
  /** Loads the packaged script; `getScript` in the extension. */
  fetchScript: (id: string) => Promise<{ entrypoint: string; script: string }>;
}

export class JobDetailsModel {
  constructor(options: IJobDetailsModelOptions) {
    this.jobId = options.jobId;
    this._fetchJob = options.fetchJob;
    this._fetchScript = options.fetchScript;
    this.poll = viewPoll(
      `jupyter_disttrain:details:${this.jobId}`,
      () => this.refresh(),
      options,
      30000
    );
  }

  readonly jobId: string;
  readonly poll: Poll;

  /** The job as last fetched (null before the first answer). */
  get job(): IJobDetail | null {
    return this._job;
  }

  /** The last error, cleared by the next success. */
  get error(): string | null {
    return this._error;
  }

  /** The packaged script, once loaded (or the reason it is not available, as a comment). */
  get script(): IPackagedScript | null {
    return this._script;
  }

  /** Whether the job has ended (nothing more to poll). */
  get ended(): boolean {
    return !!this._job && TERMINAL_PHASES.has(this._job.status.phase);
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Start polling (a no-op once the job has ended). */
  start(): Promise<void> {
    return this.ended ? Promise.resolve() : this.poll.start();
  }

  /** Fetch the job now (rejects on error so the poll backs off); stops polling once it ended. */
  async refresh(): Promise<void> {
    try {
      this._job = await this._fetchJob(this.jobId);
      this._error = null;
    } catch (err) {
      this._error = err instanceof Error ? err.message : String(err);
      this._changed.emit();
      throw err;
    }
    this._changed.emit();
    if (!this._script && !this._scriptLoading) {
      void this._loadScript();
    }
    if (this.ended) {
      void this.poll.stop();
    }
  }

  dispose(): void {
    this.poll.dispose();
    Signal.clearData(this);
  }

  private async _loadScript(): Promise<void> {
    this._scriptLoading = true;
    let script: IPackagedScript;
    try {
      const reply = await this._fetchScript(this.jobId);
      script = { name: reply.entrypoint || DEFAULT_SCRIPT, text: reply.script };
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      script = { name: DEFAULT_SCRIPT, text: `# the packaged script is not available: ${why}` };
    }
    if (this.poll.isDisposed) {
      return;
    }
    this._script = script;
    this._changed.emit();
  }

  private _fetchJob: IJobDetailsModelOptions['fetchJob'];
  private _fetchScript: IJobDetailsModelOptions['fetchScript'];
  private _job: IJobDetail | null = null;
  private _error: string | null = null;
  private _script: IPackagedScript | null = null;
  private _scriptLoading = false;
  private _changed = new Signal<this, void>(this);
}

const DEFAULT_SCRIPT = 'train.py';
