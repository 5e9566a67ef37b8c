/**
 * A job's checkpoints for its details (issue 26): `GET jobs/<id>/checkpoints` polled while the
 * job runs (one last read once it has ended), and the pure parts the view draws: each
 * checkpoint's cells, which of its actions it allows, the disk line and the job it resumed from.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { formatBytes, formatMetric, formatTime } from '../render/format';
import type { ICheckpoint, ICheckpointList, ICheckpointUsage, IResumedFrom } from '../rest/types';
import { IViewPollOptions, viewPoll } from './viewpoll';

/** A checkpoint's step (or epoch, or its id when it has neither) as people say it. */
export function checkpointName(c: Pick<ICheckpoint, 'id' | 'step' | 'epoch'>): string {
  if (c.step !== null) {
    return `step ${c.step}`;
  }
  return c.epoch !== null ? `epoch ${c.epoch}` : c.id;
}

/** `loss=0.25 acc=0.9` from a checkpoint's metrics (`<type>/<name>` → value), sorted by name. */
export function formatCheckpointMetrics(metrics: Record<string, number | string>): string {
  const entries = Object.entries(metrics).sort(([a], [b]) => a.localeCompare(b));
  return entries.length ? entries.map(([k, v]) => `${k}=${formatMetric(v)}`).join(' ') : '–';
}

/** The table's columns, in order. */
export const CHECKPOINT_COLUMNS = [
  'Step',
  'Epoch',
  'Kind',
  'Time',
  'Size',
  'State',
  'Metrics',
  'Pinned'
] as const;

/** One checkpoint's cells as text, keyed like `CHECKPOINT_COLUMNS`. */
export function checkpointCells(
  c: ICheckpoint
): Record<(typeof CHECKPOINT_COLUMNS)[number], string> {
  return {
    Step: c.step === null ? '–' : String(c.step),
    Epoch: c.epoch === null ? '–' : String(c.epoch),
    Kind: c.kind,
    Time: formatTime(c.time),
    Size: formatBytes(c.size),
    State: c.complete ? 'complete' : 'being written',
    Metrics: formatCheckpointMetrics(c.metrics),
    Pinned: c.pinned ? 'pinned' : ''
  };
}

/** Whether an action is offered, and why not when it is not (the button's tooltip). */
export interface IActionState {
  enabled: boolean;
  title: string;
}

export interface ICheckpointActionStates {
  download: IActionState;
  load: IActionState;
  resume: IActionState;
}

/**
 * Which actions a checkpoint allows: none while it is being written (its files are not all
 * there: a download or a load would get half of it, and the server refuses to resume from it).
 */
export function checkpointActionStates(c: ICheckpoint): ICheckpointActionStates {
  const name = checkpointName(c);
  if (!c.complete) {
    const wait = `${name} is still being written: wait until it is complete`;
    return {
      download: { enabled: false, title: wait },
      load: { enabled: false, title: wait },
      resume: { enabled: false, title: wait }
    };
  }
  return {
    download: {
      enabled: true,
      title: `Download ${name} (${c.kind}${c.size ? `, ${formatBytes(c.size)}` : ''})`
    },
    load: {
      enabled: true,
      title: `Insert a cell that loads ${name} below the active cell of the notebook`
    },
    resume: { enabled: true, title: `Run this job's script again from ${name}` }
  };
}

/**
 * "3 checkpoints (2 complete) use 12.3 MB · keeps the newest 2"; "at least ..." and "more not
 * listed" when the listing stopped at its budget of directory entries (`usage.more`).
 */
export function usageText(usage: ICheckpointUsage): string {
  const { count, complete, bytes, keep, more } = usage;
  const what =
    count === complete
      ? `${count} checkpoint${count === 1 ? '' : 's'}`
      : `${count} checkpoints (${complete} complete)`;
  const kept = keep > 0 ? ` · --keep-checkpoints ${keep}: keeps the newest ${keep}` : '';
  const rest = more ? ' · more not listed (too many files to look at)' : '';
  return `${more ? 'at least ' : ''}${what} use ${formatBytes(bytes)}${kept}${rest}`;
}

/** "resumed from <job>:<step>" (the checkpoint's id when it had no step). */
export function resumedFromText(from: IResumedFrom): string {
  return `resumed from ${from.job}:${from.step ?? from.checkpoint}`;
}

/** The first line of an error's message (the server's one-line reason). */
export function errorLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n', 1)[0];
}

/**
 * Reads after the job's end while a checkpoint is still "being written": a file counts as such
 * for 2 s after its last write, so one saved just before the end is complete a read or two later.
 */
export const READS_AFTER_END = 5;

/** What the Checkpoints section shows. */
export interface ICheckpointsState {
  /** The last listing (null before the first answer). */
  list: ICheckpointList | null;
  /** The last error, cleared by the next success. */
  error: string | null;
  /** Whether the reads are over (the job ended and its checkpoints were listed after that). */
  done: boolean;
}

export interface ICheckpointsModelOptions extends IViewPollOptions {
  jobId: string;
  /** Lists the job's checkpoints; `listCheckpoints` in the extension. */
  fetchCheckpoints: (id: string) => Promise<ICheckpointList>;
  /** Whether the job has ended: the first read begun after it ended is the last one. */
  ended?: () => boolean;
}

export class CheckpointsModel {
  constructor(options: ICheckpointsModelOptions) {
    this.jobId = options.jobId;
    this._fetch = options.fetchCheckpoints;
    this._ended = options.ended ?? (() => false);
    this.poll = viewPoll(
      `jupyter_disttrain:checkpoints:${this.jobId}`,
      () => this.refresh(),
      options,
      30000
    );
  }

  readonly jobId: string;
  readonly poll: Poll;

  /** What the section shows; replaced (not changed in place) by each read. */
  get state(): Readonly<ICheckpointsState> {
    return this._state;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  start(): Promise<void> {
    return this._state.done ? Promise.resolve() : this.poll.start();
  }

  /**
   * List the checkpoints (rejects on error so the poll backs off); stops after the job's end,
   * once none is being written (or after `READS_AFTER_END` reads).
   */
  async refresh(): Promise<void> {
    const last = this._ended();
    let list: ICheckpointList;
    try {
      list = await this._fetch(this.jobId);
    } catch (err) {
      this._state = { ...this._state, error: errorLine(err) };
      this._changed.emit();
      throw err;
    }
    if (this.poll.isDisposed) {
      return;
    }
    const settled = list.checkpoints.every(c => c.complete);
    const done = last && (settled || ++this._readsAfterEnd >= READS_AFTER_END);
    this._state = { list, error: null, done };
    if (done) {
      void this.poll.stop();
    }
    this._changed.emit();
  }

  dispose(): void {
    this.poll.dispose();
    Signal.clearData(this);
  }

  private _fetch: ICheckpointsModelOptions['fetchCheckpoints'];
  private _ended: () => boolean;
  private _state: ICheckpointsState = { list: null, error: null, done: false };
  private _readsAfterEnd = 0;
  private _changed = new Signal<this, void>(this);
}
