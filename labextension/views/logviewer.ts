/**
 * The log viewer: the lines of a `LogFeed` (one replica or all of them interleaved, followed
 * live), filtered, under a `LogControls` bar.
 *
 * Only the rows inside the viewport are in the DOM, so a million-line log scrolls like a short
 * one. Follow mode keeps the end in view until the user scrolls up, and resumes when they
 * scroll back to the end.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { parseAnsi, renderAnsi } from '../render/ansi';
import { LogControls } from './logcontrols';
import { LogChange, LogFeed } from '../models/logfeed';
import { FilteredView } from '../models/logbuffer';
import { FollowState, isAtBottom, visibleRange } from '../render/virtual';

/** Row height until one is measured (a row of the theme's code font). */
const DEFAULT_ROW_HEIGHT = 17;

export class LogViewer extends Widget {
  constructor(readonly feed: LogFeed) {
    super();
    this.addClass('jp-DistTrainLog');
    this.node.tabIndex = -1;
    this._view = new FilteredView(feed.selection.buffer);
    this._controls = new LogControls(feed.selection.replica, feed.selection.tail, {
      replica: replica => void feed.select({ replica }),
      tail: tail => void feed.select({ tail }),
      follow: () => this._toggleFollow(),
      filter: query => {
        this._view.setQuery(query);
        this._scheduleRender();
        this._showStatus();
      },
      download: () => void this.download()
    });
    this._controls.showFollow(this._follow);

    this._viewport.className = 'jp-DistTrainLog-viewport';
    this._viewport.tabIndex = 0;
    this._viewport.setAttribute('role', 'log');
    this._viewport.setAttribute('aria-label', `Log of ${this.jobId}`);
    this._spacer.className = 'jp-DistTrainLog-spacer';
    this._rows.className = 'jp-DistTrainLog-rows';
    this._spacer.append(this._rows);
    this._viewport.append(this._spacer);
    this.node.append(this._controls.node, this._viewport);
    this._viewport.addEventListener('scroll', this._onScroll, { passive: true });

    feed.changed.connect(this._onChanged, this);
  }

  get jobId(): string {
    return this.feed.jobId;
  }

  /** The replica shown ('' = all, interleaved). */
  get replica(): string {
    return this.feed.selection.replica;
  }

  /** Download the whole log of the current selection as a text file. */
  async download(): Promise<void> {
    const chunks = await this.feed.readAll();
    if (!chunks) {
      return; // the status says why
    }
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob(chunks, { type: 'text/plain' }));
    a.download = `${this.jobId}${this.replica ? '-' + this.replica : ''}.log`;
    document.body.append(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.feed.dispose();
    this._controls.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.feed.start();
    this._scheduleRender();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._scheduleRender();
    this.feed.resume();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._scheduleRender();
  }

  protected onActivateRequest(): void {
    this._viewport.focus();
  }

  private _onChanged(_: LogFeed, change: LogChange): void {
    if (change.kind === 'reset') {
      this._view = new FilteredView(this.feed.selection.buffer, this._controls.query);
      this._scheduleRender();
    } else if (change.kind === 'lines') {
      this._view.update(change.first);
      this._scheduleRender();
    } else {
      this._showJob();
      this._showStatus();
    }
  }

  private _showJob(): void {
    const { replicas, name, endedPhase } = this.feed.job;
    if (replicas !== this._replicas) {
      this._replicas = replicas;
      this._controls.setReplicas(replicas, this.replica);
    }
    if (name) {
      this.title.label = `Logs: ${name}`;
    }
    if (endedPhase) {
      this.title.caption = `${this.jobId} (${endedPhase})`;
    }
  }

  /** The feed's message, else how many lines there are (and shown by the filter). */
  private _showStatus(): void {
    const { status, selection } = this.feed;
    const buffer = this._view.buffer;
    const count = () =>
      (this._view.query ? `${this._view.length.toLocaleString()} of ` : '') +
      `${buffer.length.toLocaleString()} lines` +
      (selection.done ? ' · ended' : '');
    this._controls.showStatus(status.message ?? count(), status.error);
  }

  private _toggleFollow(): void {
    const on = !this._follow.active;
    this._follow.enabled = on;
    this._follow.paused = false;
    if (on) {
      this._scrollToEnd();
    }
    this._controls.showFollow(this._follow);
  }

  private _onScroll = (): void => {
    const v = this._viewport;
    const before = this._follow.active;
    this._follow.onScroll(v.scrollTop, isAtBottom(v.scrollTop, v.clientHeight, v.scrollHeight));
    if (before !== this._follow.active) {
      this._controls.showFollow(this._follow);
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
    return this._measured || DEFAULT_ROW_HEIGHT;
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
    const buffer = this._view.buffer;
    const rows: HTMLElement[] = [];
    for (let row = start; row < end; row++) {
      const i = this._view.index(row);
      const div = document.createElement('div');
      div.className = 'jp-DistTrainLog-row';
      div.dataset.replica = buffer.replica(i);
      renderAnsi(div, parseAnsi(buffer.line(i)));
      rows.push(div);
    }
    this._rows.replaceChildren(...rows);
  }

  private _controls: LogControls;
  private _replicas: readonly string[] = [];
  private _view: FilteredView;
  private _follow = new FollowState(true);
  private _frame = 0;
  private _measured = 0;
  private _viewport = document.createElement('div');
  private _spacer = document.createElement('div');
  private _rows = document.createElement('div');
}
