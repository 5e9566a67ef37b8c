/**
 * The log viewer: one replica or all of them interleaved, followed live.
 *
 * Lines are fetched by offset (the tail first, then any backlog) into a `LogBuffer`, then
 * followed through the server's event stream from that offset; if the stream fails, by
 * polling from the last offset it delivered, so no line is lost or repeated either way. Only the rows inside the viewport are in the DOM, so a million-line log scrolls like a
 * short one. Follow mode keeps the end in view until the user scrolls up, and resumes when
 * they scroll back to the end.
 */
import { Poll } from '@lumino/polling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { getJob, getLogs, ILogLine, streamLogs, TERMINAL_PHASES } from './api';
import { parseAnsi, renderAnsi } from './ansi';
import { FilteredView, LogBuffer, rawText } from './logbuffer';
import { FollowState, isAtBottom, visibleRange } from './virtual';

/** Lines per request when paging through a whole log. */
export const PAGE = 10000;
const MAX_LIMIT = PAGE; // the server caps lines per request at 10,000
const ALL = 0; // tail value meaning "from the first line"
const TAILS = [100, 1000, 10000, 100000, ALL];

export interface ILogViewerOptions {
  jobId: string;
  replica?: string;
  tail?: number;
  interval?: number;
}

export class LogViewer extends Widget {
  constructor(options: ILogViewerOptions) {
    super();
    this.jobId = options.jobId;
    this._replica = options.replica ?? '';
    this._tail = options.tail ?? 1000;
    this.addClass('jp-DistTrainLog');
    this.node.tabIndex = -1;

    this._controls = this._buildControls();
    this._viewport = document.createElement('div');
    this._viewport.className = 'jp-DistTrainLog-viewport';
    this._viewport.tabIndex = 0;
    this._viewport.setAttribute('role', 'log');
    this._viewport.setAttribute('aria-label', `Log of ${this.jobId}`);
    this._spacer = document.createElement('div');
    this._spacer.className = 'jp-DistTrainLog-spacer';
    this._rows = document.createElement('div');
    this._rows.className = 'jp-DistTrainLog-rows';
    this._spacer.append(this._rows);
    this._viewport.append(this._spacer);
    this.node.append(this._controls, this._viewport);
    this._viewport.addEventListener('scroll', this._onScroll, { passive: true });

    this._poll = new Poll({
      auto: false,
      factory: () => this._fetchMore(),
      frequency: { interval: options.interval ?? 1000, backoff: true, max: 30000 },
      name: `jupyter_disttrain:logs:${this.jobId}`,
      standby: () => !this.isVisible || 'when-hidden'
    });
  }

  readonly jobId: string;

  /** The replica shown ('' = all, interleaved). */
  get replica(): string {
    return this._replica;
  }

  /** Number of display lines loaded. */
  get lineCount(): number {
    return this._buffer.length;
  }

  /** Load (again) from the current replica/tail and follow. */
  async reload(): Promise<void> {
    const generation = ++this._generation;
    this._loading = true;
    this._stopStream();
    this._streamFailed = false;
    await this._poll.stop();
    this._buffer = new LogBuffer(this._replica === '');
    this._view = new FilteredView(this._buffer, this._filter.value);
    this._done = false;
    this._setStatus('Loading…');
    this._scheduleRender();
    try {
      if (this._replicaSelect.options.length <= 1) {
        void this._loadReplicas();
      }
      if (this._tail === ALL) {
        await this._pageFrom('', generation);
      } else {
        const page = await getLogs(this.jobId, {
          replica: this._replica,
          tail: this._tail,
          limit: Math.min(this._tail, MAX_LIMIT)
        });
        if (generation !== this._generation) {
          return;
        }
        this._add(page.lines, page.offset);
        this._done = page.done;
      }
    } catch (err) {
      this._setStatus(`Cannot load the log: ${err instanceof Error ? err.message : err}`, true);
      return;
    } finally {
      if (generation === this._generation) {
        this._loading = false;
      }
    }
    if (generation !== this._generation) {
      return;
    }
    this._setStatus();
    if (!this._done) {
      void this._poll.start(); // catches up by offset, then follows the stream
    }
  }

  /** Download the whole log of the current selection as a text file. */
  async download(): Promise<void> {
    const chunks: string[] = [];
    let offset = '';
    let total = 0;
    this._setStatus('Preparing download…');
    try {
      for (;;) {
        const page = await getLogs(this.jobId, { replica: this._replica, offset, limit: PAGE });
        chunks.push(rawText(page.lines));
        total += page.lines.length;
        offset = page.offset;
        this._setStatus(`Preparing download… ${total.toLocaleString()} lines`);
        if (!page.more) {
          break;
        }
      }
    } catch (err) {
      this._setStatus(`Download failed: ${err instanceof Error ? err.message : err}`, true);
      return;
    }
    const blob = new Blob(chunks, { type: 'text/plain' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `${this.jobId}${this._replica ? '-' + this._replica : ''}.log`;
    document.body.append(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    this._setStatus();
  }

  dispose(): void {
    this._stopStream();
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this._generation === 0) {
      void this.reload();
    }
    this._scheduleRender();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._scheduleRender();
    if (!this._done && !this._stream && this._generation > 0) {
      void this._poll.refresh();
    }
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._scheduleRender();
  }

  protected onActivateRequest(): void {
    this._viewport.focus();
  }

  private async _pageFrom(offset: string, generation: number): Promise<void> {
    for (;;) {
      const page = await getLogs(this.jobId, { replica: this._replica, offset, limit: PAGE });
      if (generation !== this._generation) {
        return;
      }
      this._add(page.lines, page.offset);
      offset = page.offset;
      this._setStatus();
      if (!page.more) {
        this._done = page.done;
        return;
      }
      // let the page breathe between pages of a huge log
      await new Promise(resolve => requestAnimationFrame(resolve));
    }
  }

  /** Follow the event stream from the last offset; poll from where it stopped if it fails. */
  private async _followStream(generation: number): Promise<void> {
    const stream = new AbortController();
    this._stream = stream;
    const current = () => generation === this._generation && !stream.signal.aborted;
    try {
      const ended = await streamLogs(
        this.jobId,
        { replica: this._replica, offset: this._buffer.offset },
        {
          lines: (lines, offset) => {
            if (current()) {
              this._add(lines, offset);
              this._setStatus();
            }
          },
          end: (phase, offset) => {
            if (current()) {
              this._buffer.offset = offset || this._buffer.offset;
              this._done = true;
              this.title.caption = `${this.jobId} (${phase})`;
              this._setStatus();
            }
          }
        },
        stream.signal
      );
      if (ended || !current()) {
        return;
      }
    } catch (err) {
      if (!current()) {
        return;
      }
      console.warn(`jupyter_disttrain: log stream of ${this.jobId} failed, polling`, err);
    } finally {
      if (this._stream === stream) {
        this._stream = null;
      }
    }
    this._streamFailed = true; // closed early or failed: poll from where it stopped
    void this._poll.start();
  }

  private _stopStream(): void {
    this._stream?.abort();
    this._stream = null;
  }

  private async _fetchMore(): Promise<void> {
    if (this._loading || this._stream) {
      return; // the first page is on its way; following starts from its offset
    }
    if (this._done) {
      await this._poll.stop();
      return;
    }
    const generation = this._generation;
    let caughtUp = false;
    for (let i = 0; i < 20 && !caughtUp; i++) {
      const page = await getLogs(this.jobId, {
        replica: this._replica,
        offset: this._buffer.offset,
        limit: PAGE
      });
      if (generation !== this._generation) {
        return;
      }
      this._add(page.lines, page.offset);
      this._done = page.done;
      caughtUp = !page.more;
    }
    this._setStatus();
    // the backlog is read by offset pages; new lines then come through the stream
    if (caughtUp && !this._done && !this._streamFailed) {
      void this._poll.stop();
      void this._followStream(generation);
    }
  }

  private _add(lines: ILogLine[], offset: string): void {
    if (lines.length === 0) {
      this._buffer.offset = offset || this._buffer.offset;
      return;
    }
    const first = this._buffer.append(lines, offset);
    this._view.update(first);
    this._scheduleRender();
  }

  private async _loadReplicas(): Promise<void> {
    try {
      const job = await getJob(this.jobId);
      for (const r of job.status.replicas) {
        const opt = document.createElement('option');
        opt.value = r.name;
        opt.textContent = r.name;
        this._replicaSelect.append(opt);
      }
      this._replicaSelect.value = this._replica;
      this.title.label = `Logs: ${job.summary.name}`;
      if (TERMINAL_PHASES.has(job.status.phase)) {
        this.title.caption = `${job.id} (${job.status.phase})`;
      }
    } catch {
      // the replica menu stays at "All replicas"; the log itself reports errors
    }
  }

  private _buildControls(): HTMLDivElement {
    const bar = document.createElement('div');
    bar.className = 'jp-DistTrainLog-controls';

    this._replicaSelect = select('Replica', [['', 'All replicas']], this._replica, value => {
      this._replica = value;
      void this.reload();
    });
    const tails = TAILS.includes(this._tail)
      ? TAILS
      : [...TAILS, this._tail].sort((a, b) => (a || Infinity) - (b || Infinity));
    const tailSelect = select(
      'Tail',
      tails.map(t => [String(t), t === ALL ? 'Whole log' : `Last ${t.toLocaleString()}`]),
      String(this._tail),
      value => {
        this._tail = Number(value);
        void this.reload();
      }
    );

    this._followButton = document.createElement('button');
    this._followButton.type = 'button';
    this._followButton.className = 'jp-DistTrainLog-follow jp-Button jp-mod-styled';
    this._followButton.addEventListener('click', () => {
      const on = !this._follow.active;
      this._follow.enabled = on;
      this._follow.paused = false;
      if (on) {
        this._scrollToEnd();
      }
      this._updateFollow();
    });

    this._filter = document.createElement('input');
    this._filter.type = 'search';
    this._filter.className = 'jp-DistTrainLog-filter jp-mod-styled';
    this._filter.placeholder = 'Filter lines';
    this._filter.setAttribute('aria-label', 'Filter lines');
    this._filter.addEventListener('input', () => {
      window.clearTimeout(this._filterTimer);
      this._filterTimer = window.setTimeout(() => {
        this._view.setQuery(this._filter.value);
        this._scheduleRender();
        this._setStatus();
      }, 150);
    });

    const download = document.createElement('button');
    download.type = 'button';
    download.className = 'jp-DistTrainLog-download jp-Button jp-mod-styled';
    download.textContent = 'Download';
    download.title = 'Download the full log';
    download.addEventListener('click', () => void this.download());

    this._status = document.createElement('span');
    this._status.className = 'jp-DistTrainLog-status';
    this._status.setAttribute('role', 'status');

    bar.append(
      this._replicaSelect,
      tailSelect,
      this._followButton,
      this._filter,
      download,
      this._status
    );
    this._updateFollow();
    return bar;
  }

  private _updateFollow(): void {
    const active = this._follow.active;
    this._followButton.textContent = active
      ? 'Following'
      : this._follow.enabled
        ? 'Paused'
        : 'Follow';
    this._followButton.setAttribute('aria-pressed', String(active));
    this._followButton.title = active
      ? 'New lines scroll into view; scroll up to pause'
      : 'Scroll to the end and follow new lines';
    this._followButton.classList.toggle('jp-mod-active', active);
  }

  private _setStatus(text?: string, error = false): void {
    if (text === undefined) {
      const n = this._buffer.length;
      const shown = this._view.length;
      text =
        (this._view.query ? `${shown.toLocaleString()} of ` : '') +
        `${n.toLocaleString()} lines` +
        (this._done ? ' · ended' : '');
    }
    this._status.textContent = text;
    this._status.classList.toggle('jp-mod-error', error);
  }

  private _onScroll = (): void => {
    const v = this._viewport;
    const before = this._follow.active;
    this._follow.onScroll(v.scrollTop, isAtBottom(v.scrollTop, v.clientHeight, v.scrollHeight));
    if (before !== this._follow.active) {
      this._updateFollow();
    }
    this._scheduleRender();
  };

  private _scrollToEnd(): void {
    const v = this._viewport;
    const target = Math.max(0, v.scrollHeight - v.clientHeight);
    if (Math.abs(v.scrollTop - target) >= 1) {
      this._follow.expectScroll(target);
      v.scrollTop = target;
    }
  }

  private _scheduleRender(): void {
    if (this._frame) {
      return;
    }
    this._frame = requestAnimationFrame(() => {
      this._frame = 0;
      this._render();
    });
  }

  private _rowHeight(): number {
    if (!this._measured) {
      const probe = document.createElement('div');
      probe.className = 'jp-DistTrainLog-row';
      probe.textContent = 'X';
      this._rows.append(probe);
      const h = probe.getBoundingClientRect().height;
      probe.remove();
      if (h > 0) {
        this._measured = h;
      }
    }
    return this._measured || 17;
  }

  private _render(): void {
    if (!this.isVisible) {
      return;
    }
    const rowHeight = this._rowHeight();
    const total = this._view.length;
    this._spacer.style.height = `${total * rowHeight}px`;
    if (this._follow.active) {
      this._scrollToEnd();
    }
    const v = this._viewport;
    const [start, end] = visibleRange(v.scrollTop, v.clientHeight, rowHeight, total);
    this._rows.style.transform = `translateY(${start * rowHeight}px)`;
    const rows: HTMLElement[] = [];
    for (let row = start; row < end; row++) {
      const i = this._view.index(row);
      const div = document.createElement('div');
      div.className = 'jp-DistTrainLog-row';
      div.dataset.replica = this._buffer.replica(i);
      renderAnsi(div, parseAnsi(this._buffer.line(i)));
      rows.push(div);
    }
    this._rows.replaceChildren(...rows);
  }

  private _replica: string;
  private _tail: number;
  private _buffer = new LogBuffer(true);
  private _view = new FilteredView(this._buffer);
  private _follow = new FollowState(true);
  private _poll: Poll;
  private _stream: AbortController | null = null;
  private _streamFailed = false; // for this selection: follow by offset polling instead
  private _done = false;
  private _loading = false;
  private _generation = 0;
  private _frame = 0;
  private _measured = 0;
  private _filterTimer = 0;
  private _controls: HTMLDivElement;
  private _viewport: HTMLDivElement;
  private _spacer: HTMLDivElement;
  private _rows: HTMLDivElement;
  private _replicaSelect!: HTMLSelectElement;
  private _followButton!: HTMLButtonElement;
  private _filter!: HTMLInputElement;
  private _status!: HTMLSpanElement;
}

function select(
  label: string,
  options: [string, string][],
  value: string,
  onChange: (value: string) => void
): HTMLSelectElement {
  const el = document.createElement('select');
  el.className = 'jp-DistTrainLog-select jp-mod-styled';
  el.setAttribute('aria-label', label);
  for (const [v, text] of options) {
    const opt = document.createElement('option');
    opt.value = v;
    opt.textContent = text;
    el.append(opt);
  }
  el.value = value;
  el.addEventListener('change', () => onChange(el.value));
  return el;
}
