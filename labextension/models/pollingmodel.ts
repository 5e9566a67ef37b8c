/**
 * The base of the models that poll the server for a view: the job list, a job's details, its
 * runs, resources and checkpoints, and the Runs view. It owns the poll (backing off while reads
 * fail, standing by while nobody looks or the browser tab is hidden), the `changed` signal, the
 * last error, and the end of polling once there is nothing more to read. A model says what a
 * read is (`fetch`) and what its answer changes (`apply`); the view only renders.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

export interface IViewPollOptions {
  /** Milliseconds between refreshes (the default 2000). */
  interval?: number;
  /** Whether someone looks; the poll stands by while not. */
  visible?: () => boolean;
}

/**
 * `factory` every `interval` ms, not started (`start()` it), backing off up to `max` ms while it
 * rejects, standing by while the view is not visible or the browser tab is hidden. The models
 * below use it through `PollingModel`; `LogFeed`, whose reads go through its selection, directly.
 */
export function viewPoll(
  name: string,
  factory: () => Promise<void>,
  options: IViewPollOptions,
  max: number
): Poll {
  const visible = options.visible ?? (() => true);
  return new Poll({
    auto: false,
    factory,
    frequency: { interval: options.interval ?? 2000, backoff: true, max },
    name,
    standby: () => !visible() || 'when-hidden'
  });
}

export interface IPollingModelOptions extends IViewPollOptions {
  /**
   * Whether what the model reads has stopped changing (its job has ended): the first read begun
   * after that is the final one (a model may still read on, e.g. while a file settles).
   */
  ended?: () => boolean;
}

/** What an error says: its message, or the thing thrown as text. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export abstract class PollingModel<T> {
  /** A model whose poll is called `name` (Lumino's name) and backs off up to `max` ms. */
  constructor(name: string, options: IPollingModelOptions, max: number) {
    this.poll = viewPoll(name, () => this.refresh(), options, max);
    this._sourceEnded = options.ended ?? (() => false);
  }

  readonly poll: Poll;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The last read's error, cleared by the next answer. */
  get error(): string | null {
    return this._error;
  }

  /** Whether an answer has come. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Whether there is nothing more to read: the poll stops and `start` does nothing. */
  get done(): boolean {
    return false;
  }

  /** Start polling (a no-op once done). */
  start(): Promise<void> {
    return this.done ? Promise.resolve() : this.poll.start();
  }

  /**
   * Read now and take the answer; rejects on error so the poll backs off. A failure is told to
   * the views when it says something new (the same error again changes nothing on screen).
   */
  async refresh(): Promise<void> {
    const final = this._sourceEnded();
    let answer: T;
    try {
      answer = await this.fetch();
    } catch (err) {
      const message = this.errorText(err);
      if (message !== this._error) {
        this._error = message;
        this._changed.emit();
      }
      throw err;
    }
    if (!this.poll.isDisposed) {
      this.take(answer, final);
    }
  }

  dispose(): void {
    this.poll.dispose();
    Signal.clearData(this);
  }

  /** One read of the server. */
  protected abstract fetch(): Promise<T>;

  /** What an answer changes in the model; `final`: its read began once nothing could change. */
  protected abstract apply(answer: T, final: boolean): void;

  /** An answer becomes the model's state: applied, the error cleared, the views told. */
  protected take(answer: T, final = false): void {
    this._error = null;
    this._loaded = true;
    this.apply(answer, final);
    if (this.done) {
      void this.poll.stop();
    }
    this._changed.emit();
  }

  /** How an error reads on screen (its message unless a model keeps less). */
  protected errorText(err: unknown): string {
    return errorMessage(err);
  }

  /** Poll every `interval` ms from now on (backoff and standby as they were). */
  protected pace(interval: number): void {
    if (this.poll.frequency.interval !== interval) {
      this.poll.frequency = { ...this.poll.frequency, interval };
    }
  }

  /** Tell the views of a change made between reads (a filter, a selection). */
  protected emitChanged(): void {
    this._changed.emit();
  }

  private _sourceEnded: () => boolean;
  private _error: string | null = null;
  private _loaded = false;
  private _changed = new Signal<this, void>(this);
}

export interface IJobPollingModelOptions extends IPollingModelOptions {
  jobId: string;
}

/** A model of one job's details (its status, runs, resources or checkpoints): one poll each. */
export abstract class JobPollingModel<T> extends PollingModel<T> {
  /** `what` names the poll (`jupyter_disttrain:<what>:<job id>`). */
  constructor(what: string, options: IJobPollingModelOptions) {
    super(`jupyter_disttrain:${what}:${options.jobId}`, options, 30000);
    this.jobId = options.jobId;
  }

  readonly jobId: string;
}
