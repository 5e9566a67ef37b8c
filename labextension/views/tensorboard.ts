/**
 * The TensorBoard tab: TensorBoard proxied by the server, in a same-origin iframe.
 *
 * TensorBoard's page does not reload its data by itself faster than every 30 s (and not at
 * all by default since 2.3), so auto-reload here presses TensorBoard's own reload button
 * inside the iframe at our interval: the charts refresh in place and keep the user's run
 * selection, zoom and scroll. If the button is not there (page still loading, or an error
 * page while TensorBoard starts), the iframe itself is reloaded, which keeps the URL state.
 */
import { MainAreaWidget, Toolbar, ToolbarButton } from '@jupyterlab/apputils';
import { IFrame, refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ALL_JOBS, startTensorBoard, tensorboardUrl } from '../rest/client';
import { chartIcon } from '../icons';
import { setTensorBoardLook } from './tblook';

/** TensorBoard's reload button (Angular component `app-header-reload`). */
export const RELOAD_BUTTON_SELECTOR = 'app-header-reload button.reload-button';

export interface ITensorBoardOptions {
  /** Job id, or `ALL_JOBS` for every job's runs side by side. */
  jobId: string;
  /** Whether JupyterLab's theme is dark (TensorBoard follows it). */
  dark?: boolean;
  autoReload?: boolean;
  /** Seconds between automatic reloads. */
  interval?: number;
  /** Show only the runs whose name this regex finds (TensorBoard's `runFilter`). */
  runFilter?: string;
}

/**
 * The page of TensorBoard for `jobId`, showing only the runs `runFilter` finds: TensorBoard
 * 2.x reads its run filter (the runs table's "Filter runs (regex)") from the `runFilter`
 * query parameter, and applies it to the run list and every chart.
 */
export function tensorboardPage(
  jobId: string,
  runFilter = '',
  base = tensorboardUrl(jobId)
): string {
  return runFilter ? `${base}?runFilter=${encodeURIComponent(runFilter)}` : base;
}

export class TensorBoardFrame extends IFrame {
  constructor(readonly jobId: string) {
    // scripts + same-origin: TensorBoard is an app served from our own origin, and we must
    // reach into it to press reload; downloads for its CSV/JSON export links.
    super({
      sandbox: ['allow-scripts', 'allow-same-origin', 'allow-downloads', 'allow-popups'],
      referrerPolicy: 'same-origin'
    });
    this.addClass('jp-DistTrainTensorBoard-frame');
  }

  get iframe(): HTMLIFrameElement {
    return this.node.querySelector('iframe')!;
  }

  /**
   * Refresh TensorBoard's data now.
   *
   * @returns `'button'` when TensorBoard reloaded in place, `'page'` when the page was reloaded
   */
  reloadData(allowPageReload = true): 'button' | 'page' | 'none' {
    let doc: Document | null = null;
    try {
      doc = this.iframe.contentDocument;
    } catch {
      doc = null; // not same-origin: nothing to press
    }
    const button = doc?.querySelector<HTMLButtonElement>(RELOAD_BUTTON_SELECTOR);
    if (button) {
      this._missed = 0;
      if (!button.disabled) {
        button.click();
      }
      return 'button';
    }
    // give the page a few ticks to boot before reloading it (it may just be loading)
    this._missed++;
    const since = Date.now() - this._loadedAt;
    if (allowPageReload && (this._missed >= 3 || since > 15000)) {
      this._missed = 0;
      this._loadedAt = Date.now();
      try {
        this.iframe.contentWindow!.location.reload(); // keeps TensorBoard's state in its URL
      } catch {
        // cross-origin error page: setting the same src again makes the browser navigate afresh
        const url = this.url;
        this.url = url;
      }
      return 'page';
    }
    return 'none';
  }

  load(url: string): void {
    this._loadedAt = Date.now();
    this.url = url;
  }

  private _missed = 0;
  private _loadedAt = 0;
}

/** The id of the TensorBoard tab of a job (or of `ALL_JOBS`). */
export function tensorboardTabId(jobId: string): string {
  return `jp-disttrain-tensorboard-${jobId}`;
}

/** MainAreaWidget with the frame and a toolbar: Reload, Auto-reload, interval. */
export class TensorBoardPanel extends MainAreaWidget<TensorBoardFrame> {
  constructor(options: ITensorBoardOptions) {
    const content = new TensorBoardFrame(options.jobId);
    super({ content });
    this.id = tensorboardTabId(options.jobId);
    this.addClass('jp-DistTrainTensorBoard');
    this.title.label =
      options.jobId === ALL_JOBS ? 'TensorBoard: all jobs' : `TensorBoard: ${options.jobId}`;
    this.title.icon = chartIcon;
    this.title.closable = true;
    this._interval = options.interval ?? 2;
    this._auto = options.autoReload ?? true;
    this._runFilter = options.runFilter ?? '';
    this._dark = options.dark ?? false;

    const reload = new ToolbarButton({
      icon: refreshIcon,
      label: 'Reload',
      tooltip: 'Reload TensorBoard data now',
      onClick: () => {
        this.content.reloadData();
      }
    });
    reload.addClass('jp-DistTrainTensorBoard-reload');
    this.toolbar.addItem('reload', reload);
    this.toolbar.addItem('auto', this._autoControls());
    this.toolbar.addItem('spacer', Toolbar.createSpacerItem());
    this._state = new Widget();
    this._state.addClass('jp-DistTrainTensorBoard-state');
    this.toolbar.addItem('state', this._state);

    void this.start();
  }

  get autoReload(): boolean {
    return this._auto;
  }

  set autoReload(on: boolean) {
    this._auto = on;
    this._checkbox.checked = on;
    this._schedule();
  }

  /** Seconds between automatic reloads (at least 1). */
  get interval(): number {
    return this._interval;
  }

  set interval(seconds: number) {
    this._interval = Math.max(1, Number(seconds) || 1);
    this._intervalInput.value = String(this._interval);
    this._schedule();
  }

  /** Whether TensorBoard is shown dark. */
  get dark(): boolean {
    return this._dark;
  }

  /** Follow a theme change: TensorBoard reads its theme when its page loads, so reload it. */
  set dark(dark: boolean) {
    if (dark === this._dark) {
      return;
    }
    this._dark = dark;
    setTensorBoardLook(dark);
    if (!this.content.url) {
      return; // not loaded yet: it will load with the new look
    }
    try {
      this.content.iframe.contentWindow!.location.reload(); // keeps TensorBoard's URL state
    } catch {
      this.content.load(this.content.url);
    }
  }

  /** The regex of the runs shown ('' for all). */
  get runFilter(): string {
    return this._runFilter;
  }

  /**
   * Show only the runs `regex` finds ('' for all). A page already shown is loaded again even
   * for the same regex: the user may have changed the filter inside TensorBoard since.
   */
  showRuns(regex: string): void {
    this._runFilter = regex;
    if (this.content.url) {
      this.content.load(tensorboardPage(this.content.jobId, regex));
    }
  }

  /** Ask the server for this TensorBoard (starts it if needed), then show it. */
  async start(): Promise<void> {
    this._state.node.textContent = 'Starting TensorBoard…';
    try {
      await startTensorBoard(this.content.jobId);
      this._state.node.textContent = '';
    } catch (err) {
      this._state.node.textContent = `TensorBoard: ${err instanceof Error ? err.message : err}`;
      this._state.node.classList.add('jp-mod-error');
      return;
    }
    setTensorBoardLook(this._dark);
    this.content.load(tensorboardPage(this.content.jobId, this._runFilter));
    this._schedule();
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  private _schedule(): void {
    window.clearInterval(this._timer);
    this._timer = 0;
    if (this._auto && this.content.url) {
      this._timer = window.setInterval(() => {
        // a hidden tab does not need fresh charts; catch up when shown
        if (this.isVisible && !document.hidden) {
          this.content.reloadData();
        }
      }, this._interval * 1000);
    }
  }

  protected onAfterShow(): void {
    if (this._auto && this.content.url) {
      this.content.reloadData(false);
    }
  }

  private _autoControls(): Widget {
    const w = new Widget();
    w.addClass('jp-DistTrainTensorBoard-auto');
    const label = document.createElement('label');
    this._checkbox = document.createElement('input');
    this._checkbox.type = 'checkbox';
    this._checkbox.checked = this._auto;
    this._checkbox.addEventListener('change', () => {
      this.autoReload = this._checkbox.checked;
    });
    label.append(this._checkbox, ' Auto-reload every ');
    this._intervalInput = document.createElement('input');
    this._intervalInput.type = 'number';
    this._intervalInput.min = '1';
    this._intervalInput.value = String(this._interval);
    this._intervalInput.className = 'jp-DistTrainTensorBoard-interval';
    this._intervalInput.setAttribute('aria-label', 'Auto-reload interval in seconds');
    this._intervalInput.addEventListener('change', () => {
      this.interval = Number(this._intervalInput.value);
    });
    w.node.append(label, this._intervalInput, ' s');
    return w;
  }

  private _auto: boolean;
  private _dark: boolean;
  private _interval: number;
  private _runFilter: string;
  private _timer = 0;
  private _state: Widget;
  private _checkbox!: HTMLInputElement;
  private _intervalInput!: HTMLInputElement;
}
