/**
 * A job's checkpoints for its details (issue 26): `GET jobs/<id>/checkpoints` polled while the
 * job runs (one last read once it has ended), and the pure parts the view draws: each
 * checkpoint's cells, which of its actions it allows, the disk line and the job it resumed from.
 */
import { formatBytes, formatMetric, formatTime } from '../render/format';
import type { ICheckpoint, ICheckpointList, ICheckpointUsage, IResumedFrom } from '../rest/types';
import { errorMessage, IJobPollingModelOptions, JobPollingModel } from './pollingmodel';

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
  return errorMessage(err).split('\n', 1)[0];
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

export interface ICheckpointsModelOptions extends IJobPollingModelOptions {
  /** Lists the job's checkpoints; `listCheckpoints` in the extension. */
  fetchCheckpoints: (id: string) => Promise<ICheckpointList>;
}

export class CheckpointsModel extends JobPollingModel<ICheckpointList> {
  constructor(private _options: ICheckpointsModelOptions) {
    super('checkpoints', _options);
  }

  /** What the section shows (a new object each time it is asked). */
  get state(): Readonly<ICheckpointsState> {
    return { list: this._list, error: this.error, done: this._done };
  }

  /**
   * Whether the reads are over: after the job's end, once none is being written (or after
   * `READS_AFTER_END` reads).
   */
  get done(): boolean {
    return this._done;
  }

  protected fetch(): Promise<ICheckpointList> {
    return this._options.fetchCheckpoints(this.jobId);
  }

  protected apply(list: ICheckpointList, final: boolean): void {
    const settled = list.checkpoints.every(c => c.complete);
    this._list = list;
    this._done = final && (settled || ++this._readsAfterEnd >= READS_AFTER_END);
  }

  /** The server's one-line reason, without the lines after it. */
  protected errorText(err: unknown): string {
    return errorLine(err);
  }

  private _list: ICheckpointList | null = null;
  private _done = false;
  private _readsAfterEnd = 0;
}
