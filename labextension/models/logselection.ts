/**
 * One selection of a job's log (one replica or all of them, from a tail), loaded and then
 * followed until it is stopped: `LogFeed` makes a new one for each reload.
 *
 * The first answer is the last `tail` lines (or every page of the whole log); the backlog
 * after it is read by offset (the feed's poll), then new lines come through the server's event
 * stream from that offset; if the stream fails or closes early, the poll follows by offset from
 * the last line it delivered, so no line is lost or repeated either way.
 */
import { Poll } from '@lumino/polling';

import { LogBuffer } from './logbuffer';
import { ILogStreamHandlers } from '../rest/logstream';
import { ILogPage, ILogQuery } from '../rest/types';

/** Lines per request when paging through a log (the server's cap per request). */
export const PAGE = 10000;
/** The `tail` meaning "from the first line". */
export const ALL = 0;
/** Pages read per poll while catching up, so one huge backlog does not hold the page up. */
const PAGES_PER_POLL = 20;

/** How a log is read: `getLogs` and `streamLogs` of the extension, or a test's fakes. */
export interface ILogTransport {
  jobId: string;
  /** Reads a page of the log. */
  fetchLogs: (id: string, query: ILogQuery) => Promise<ILogPage>;
  /**
   * Follows the log from `offset` until the job ends (resolves true), the server closes the
   * stream early (false) or `signal` aborts it; rejects when it fails.
   */
  streamLogs: (
    id: string,
    query: { replica?: string; offset?: string },
    handlers: ILogStreamHandlers,
    signal: AbortSignal
  ) => Promise<boolean>;
}

/** What a selection tells its feed (never once it is stopped). */
export interface ILogSelectionEvents {
  /** Lines were added or rewritten from buffer index `first` on. */
  appended(first: number): void;
  /** Lines arrived or `done` changed. */
  progressed(): void;
  /** The stream says the job ended in `phase`, every line sent. */
  ended(phase: string): void;
}

/**
 * Read a log page by page from its first line: `read` fetches the page at an offset, `take`
 * gets each page and returns false to stop before the end.
 */
export async function eachPage(
  read: (offset: string) => Promise<ILogPage>,
  take: (page: ILogPage) => boolean | Promise<boolean>
): Promise<void> {
  let offset = '';
  for (;;) {
    const page = await read(offset);
    if (!(await take(page)) || !page.more) {
      return;
    }
    offset = page.offset;
  }
}

/** Let the page render between the pages of a huge log. */
function breathe(): Promise<unknown> {
  return typeof requestAnimationFrame === 'function'
    ? new Promise(resolve => requestAnimationFrame(resolve))
    : new Promise(resolve => setTimeout(resolve, 0));
}

/** What a view reads of a selection. */
export interface ILogSelectionState {
  /** The replica shown ('' = all, interleaved). */
  readonly replica: string;
  /** Lines loaded first from the end (`ALL`: every line). */
  readonly tail: number;
  /** The lines (with the replica in front of each when all are interleaved). */
  readonly buffer: LogBuffer;
  /** Whether the job has ended and every line is in the buffer. */
  readonly done: boolean;
}

export class LogSelection implements ILogSelectionState {
  /**
   * @param poll - the feed's poll, whose factory is this selection's `fetchMore`
   */
  constructor(
    readonly replica: string,
    readonly tail: number,
    private _transport: ILogTransport,
    private _poll: Poll,
    private _events: ILogSelectionEvents
  ) {
    this.buffer = new LogBuffer(replica === '');
  }

  /** The lines (with the replica in front of each when all are interleaved). */
  readonly buffer: LogBuffer;

  /** Whether the job has ended and every line is in the buffer. */
  get done(): boolean {
    return this._done;
  }

  /** Whether new lines come through the event stream now. */
  get streaming(): boolean {
    return this._stream !== null;
  }

  /** A page from `offset` (every replica's position in one token when interleaved). */
  page = (offset: string): Promise<ILogPage> =>
    this._transport.fetchLogs(this._transport.jobId, {
      replica: this.replica,
      offset,
      limit: PAGE
    });

  /** Load the first answer: the last `tail` lines, or every page of the whole log. */
  async load(): Promise<void> {
    try {
      if (this.tail !== ALL) {
        const { jobId, fetchLogs } = this._transport;
        const limit = Math.min(this.tail, PAGE);
        const page = await fetchLogs(jobId, { replica: this.replica, tail: this.tail, limit });
        this._take(page);
      } else {
        await eachPage(this.page, async page => {
          if (!this._take(page) || !page.more) {
            return false;
          }
          this._events.progressed();
          await breathe();
          return true;
        });
      }
    } finally {
      this._loading = false;
    }
  }

  /** The poll's work: read the backlog by offset, then follow the stream (unless it failed). */
  async fetchMore(): Promise<void> {
    if (this._loading || this._stream || this._stopped) {
      return; // the first page is on its way; following starts from its offset
    }
    if (this._done) {
      await this._poll.stop();
      return;
    }
    let caughtUp = false;
    for (let i = 0; i < PAGES_PER_POLL && !caughtUp; i++) {
      const page = await this.page(this.buffer.offset);
      if (!this._take(page)) {
        return;
      }
      caughtUp = !page.more;
    }
    this._events.progressed();
    // the backlog is read by offset pages; new lines then come through the stream
    if (caughtUp && !this._done && !this._streamFailed) {
      void this._poll.stop();
      void this._follow();
    }
  }

  /** Drop whatever is still on its way; the selection says nothing more. */
  stop(): void {
    this._stopped = true;
    this._stream?.abort();
    this._stream = null;
  }

  /** Add a page's lines and whether the log is done; false once stopped (nothing added). */
  private _take(page: ILogPage): boolean {
    if (this._stopped) {
      return false;
    }
    this._add(page.lines, page.offset);
    this._done = page.done;
    return true;
  }

  private _add(lines: ILogPage['lines'], offset: string): void {
    if (lines.length === 0) {
      this.buffer.offset = offset || this.buffer.offset;
      return;
    }
    this._events.appended(this.buffer.append(lines, offset));
  }

  /** Follow the event stream from the last offset; poll from where it stopped if it fails. */
  private async _follow(): Promise<void> {
    const stream = new AbortController();
    this._stream = stream;
    const current = () => !stream.signal.aborted; // `stop` aborts it
    const handlers: ILogStreamHandlers = {
      lines: (lines, offset) => {
        if (current()) {
          this._add(lines, offset);
          this._events.progressed();
        }
      },
      end: (phase, offset) => {
        if (current()) {
          this.buffer.offset = offset || this.buffer.offset;
          this._done = true;
          this._events.ended(phase);
        }
      }
    };
    const { jobId, streamLogs } = this._transport;
    const query = { replica: this.replica, offset: this.buffer.offset };
    try {
      if ((await streamLogs(jobId, query, handlers, stream.signal)) || !current()) {
        return;
      }
    } catch (err) {
      if (!current()) {
        return;
      }
      console.warn(`jupyter_disttrain: log stream of ${jobId} failed, polling`, err);
    } finally {
      if (this._stream === stream) {
        this._stream = null;
      }
    }
    this._streamFailed = true; // closed early or failed: poll from where it stopped
    void this._poll.start();
  }

  private _done = false;
  private _loading = true;
  private _stopped = false;
  private _stream: AbortController | null = null;
  private _streamFailed = false; // follow by offset polling instead
}
