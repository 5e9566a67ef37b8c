/**
 * The log viewer's model: the lines of one replica, or of all of them interleaved, loaded and
 * followed live (`LogSelection`, one per reload), the job's replicas for the menu, what the
 * feed is busy with, and the whole log read for a download.
 *
 * The transport is injected (`getLogs`, `streamLogs`, `getJob` in the extension), so the tests
 * drive it with fakes; the view (`LogViewer`) only renders.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { rawText } from './logbuffer';
import { eachPage, ILogSelectionState, ILogTransport, LogSelection } from './logselection';
import { IJobDetail, TERMINAL_PHASES } from '../rest/types';
import { IViewPollOptions, viewPoll } from './pollingmodel';

export { ALL, PAGE } from './logselection';

export interface ILogFeedOptions extends ILogTransport, IViewPollOptions {
  /** The replica to show ('' = all, interleaved; the default). */
  replica?: string;
  /** Lines to start from at the end (`ALL`: the whole log); 1000 by default. */
  tail?: number;
  /** Loads the job (its replicas, name and phase); `getJob` in the extension. */
  fetchJob: (id: string) => Promise<IJobDetail>;
}

/** What the feed is busy with or what went wrong (`message` null: nothing beyond the lines). */
export interface ILogStatus {
  message: string | null;
  /** Whether `message` says what went wrong. */
  error: boolean;
}

/**
 * A change of a feed: a new selection (`reset`: `buffer` is a new, empty one), lines added or
 * rewritten from buffer index `first` on (`lines`), or its `status`, `done` or `job` (`status`,
 * the count of lines with them).
 */
export type LogChange = { kind: 'reset' } | { kind: 'lines'; first: number } | { kind: 'status' };

/** What the job says about the log: its replicas, its name and the phase it ended in. */
export interface ILogJob {
  /** The replica names (empty until loaded, or when the job could not be read). */
  replicas: readonly string[];
  name: string | null;
  /** The phase the job ended in, once known (null while it runs). */
  endedPhase: string | null;
}

function reason(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The job's replicas, name and (once ended) phase; null when it cannot be read. */
async function readJob(fetchJob: ILogFeedOptions['fetchJob'], id: string): Promise<ILogJob | null> {
  try {
    const job = await fetchJob(id);
    const { phase, replicas } = job.status;
    const endedPhase = TERMINAL_PHASES.has(phase) ? phase : null;
    return { replicas: replicas.map(r => r.name), name: job.summary.name, endedPhase };
  } catch {
    return null; // the menu stays at "All replicas"; the log itself reports errors
  }
}

export class LogFeed {
  constructor(options: ILogFeedOptions) {
    this.jobId = options.jobId;
    this._options = options;
    this.poll = viewPoll(
      `jupyter_disttrain:logs:${this.jobId}`,
      () => this._selection.fetchMore(),
      { ...options, interval: options.interval ?? 1000 },
      30000
    );
    this._selection = this._select(options.replica ?? '', options.tail ?? 1000);
  }

  readonly jobId: string;
  /** Catches up by offset, and follows by offset once the stream failed; not started. */
  readonly poll: Poll;

  /** What changed: the selection, lines, or the status, `done` or `job`. */
  get changed(): ISignal<this, LogChange> {
    return this._changed;
  }

  /** The replica, tail and lines shown now (a new selection on every reload). */
  get selection(): ILogSelectionState {
    return this._selection;
  }

  /** Load from the current selection, once; later calls do nothing (see `reload`). */
  start(): Promise<void> {
    return this._started ? Promise.resolve() : this.reload();
  }

  /** Show another replica and/or tail: load afresh. */
  select(selection: { replica?: string; tail?: number }): Promise<void> {
    return this._load(
      selection.replica ?? this._selection.replica,
      selection.tail ?? this._selection.tail
    );
  }

  /** Load (again) from the current replica/tail and follow. */
  reload(): Promise<void> {
    return this._load(this._selection.replica, this._selection.tail);
  }

  /** Catch up now if the feed waits for lines it does not stream (the view is shown again). */
  resume(): void {
    if (this._started && !this._selection.done && !this._selection.streaming) {
      void this.poll.refresh();
    }
  }

  /** The job's replicas, name and ended phase, as far as known. */
  get job(): ILogJob {
    return this._job;
  }

  /** What the feed is busy with, or why it failed. */
  get status(): ILogStatus {
    return this._status;
  }

  /**
   * The whole log of the current selection as file text, read page by page (null when a read
   * failed; `status` says why).
   */
  async readAll(): Promise<string[] | null> {
    const chunks: string[] = [];
    let total = 0;
    this._setStatus('Preparing download…');
    try {
      await eachPage(this._selection.page, page => {
        chunks.push(rawText(page.lines));
        total += page.lines.length;
        this._setStatus(`Preparing download… ${total.toLocaleString()} lines`);
        return true;
      });
    } catch (err) {
      this._setStatus(`Download failed: ${reason(err)}`, true);
      return null;
    }
    this._setStatus();
    return chunks;
  }

  dispose(): void {
    if (this.poll.isDisposed) {
      return;
    }
    this._selection.stop();
    this.poll.dispose();
    Signal.clearData(this);
  }

  private async _load(replica: string, tail: number): Promise<void> {
    this._started = true;
    this._selection.stop();
    const selection = this._select(replica, tail);
    this._selection = selection;
    // at once: the view must never pair the new buffer with the old filter
    this._changed.emit({ kind: 'reset' });
    this._setStatus('Loading…');
    await this.poll.stop();
    if (this._job.replicas.length === 0) {
      void this._loadJob();
    }
    try {
      await selection.load();
    } catch (err) {
      if (selection === this._selection) {
        this._setStatus(`Cannot load the log: ${reason(err)}`, true);
      }
      return;
    }
    if (selection !== this._selection) {
      return;
    }
    this._setStatus();
    if (!selection.done) {
      void this.poll.start(); // catches up by offset, then follows the stream
    }
  }

  /** A new selection, reporting to this feed. */
  private _select(replica: string, tail: number): LogSelection {
    return new LogSelection(replica, tail, this._options, this.poll, {
      appended: first => this._changed.emit({ kind: 'lines', first }),
      progressed: () => this._setStatus(),
      ended: phase => {
        this._job = { ...this._job, endedPhase: phase };
        this._setStatus();
      }
    });
  }

  private async _loadJob(): Promise<void> {
    const job = await readJob(this._options.fetchJob, this.jobId);
    if (job && !this.poll.isDisposed) {
      this._job = { ...job, endedPhase: job.endedPhase ?? this._job.endedPhase };
      this._changed.emit({ kind: 'status' });
    }
  }

  private _setStatus(message: string | null = null, error = false): void {
    this._status = { message, error };
    this._changed.emit({ kind: 'status' });
  }

  private _options: ILogFeedOptions; // the transport
  private _selection: LogSelection;
  private _started = false;
  private _status: ILogStatus = { message: null, error: false };
  private _job: ILogJob = { replicas: [], name: null, endedPhase: null };
  private _changed = new Signal<this, LogChange>(this);
}
