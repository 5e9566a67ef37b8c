/**
 * The job details view's model: one job's detail, polled until it ends, and its packaged
 * script, loaded once. Like `JobsModel`, it owns the fetching and the view only renders.
 */
import { IJobDetail, TERMINAL_PHASES } from '../rest/types';
import { errorMessage, IJobPollingModelOptions, JobPollingModel } from './pollingmodel';

export interface IPackagedScript {
  /** File name of the entry point (e.g. `train.py`). */
  name: string;
  text: string;
}

export interface IJobDetailsModelOptions extends IJobPollingModelOptions {
  /** Loads the job's detail; `getJob` in the extension. */
  fetchJob: (id: string) => Promise<IJobDetail>;
  /** Loads the packaged script; `getScript` in the extension. */
  fetchScript: (id: string) => Promise<{ entrypoint: string; script: string }>;
}

export class JobDetailsModel extends JobPollingModel<IJobDetail> {
  constructor(private _options: IJobDetailsModelOptions) {
    super('details', _options);
  }

  /** The job as last fetched (null before the first answer). */
  get job(): IJobDetail | null {
    return this._job;
  }

  /** The packaged script, once loaded (or the reason it is not available, as a comment). */
  get script(): IPackagedScript | null {
    return this._script;
  }

  /** Whether the job has ended (nothing more to poll). */
  get ended(): boolean {
    return !!this._job && TERMINAL_PHASES.has(this._job.status.phase);
  }

  get done(): boolean {
    return this.ended;
  }

  protected fetch(): Promise<IJobDetail> {
    return this._options.fetchJob(this.jobId);
  }

  /** The job as fetched; the script is loaded once, after the first answer. */
  protected apply(job: IJobDetail): void {
    this._job = job;
    if (!this._script && !this._scriptLoading) {
      void this._loadScript();
    }
  }

  private async _loadScript(): Promise<void> {
    this._scriptLoading = true;
    let script: IPackagedScript;
    try {
      const reply = await this._options.fetchScript(this.jobId);
      script = { name: reply.entrypoint || DEFAULT_SCRIPT, text: reply.script };
    } catch (err) {
      script = {
        name: DEFAULT_SCRIPT,
        text: `# the packaged script is not available: ${errorMessage(err)}`
      };
    }
    if (this.poll.isDisposed) {
      return;
    }
    this._script = script;
    this.emitChanged();
  }

  private _job: IJobDetail | null = null;
  private _script: IPackagedScript | null = null;
  private _scriptLoading = false;
}

const DEFAULT_SCRIPT = 'train.py';
