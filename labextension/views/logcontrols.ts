/**
 * The log viewer's control bar: replica, tail, follow, filter, download and the status line.
 * It holds no state of the log: it reports what the user picks and shows what it is told.
 */
import { ALL } from '../models/logselection';
import { FollowState } from '../render/virtual';

const TAILS = [100, 1000, 10000, 100000, ALL];
/** Milliseconds the filter waits for the user to stop typing. */
const FILTER_DELAY = 150;

export interface ILogControlsHandlers {
  /** A replica was picked ('' = all). */
  replica(value: string): void;
  /** A tail was picked (`ALL`: the whole log). */
  tail(value: number): void;
  /** The follow button was pressed. */
  follow(): void;
  /** The filter changed (after the user paused typing). */
  filter(query: string): void;
  download(): void;
}

export class LogControls {
  constructor(replica: string, tail: number, handlers: ILogControlsHandlers) {
    this.node.className = 'jp-DistTrainLog-controls';
    this._replica = select('Replica', [['', 'All replicas']], replica, handlers.replica);
    const tails = TAILS.includes(tail)
      ? TAILS
      : [...TAILS, tail].sort((a, b) => (a || Infinity) - (b || Infinity));
    const tailSelect = select(
      'Tail',
      tails.map(t => [String(t), t === ALL ? 'Whole log' : `Last ${t.toLocaleString()}`]),
      String(tail),
      value => handlers.tail(Number(value))
    );

    this._follow.type = 'button';
    this._follow.className = 'jp-DistTrainLog-follow jp-Button jp-mod-styled';
    this._follow.addEventListener('click', () => handlers.follow());

    this._filter.type = 'search';
    this._filter.className = 'jp-DistTrainLog-filter jp-mod-styled';
    this._filter.placeholder = 'Filter lines';
    this._filter.setAttribute('aria-label', 'Filter lines');
    this._filter.addEventListener('input', () => {
      window.clearTimeout(this._filterTimer);
      this._filterTimer = window.setTimeout(
        () => handlers.filter(this._filter.value),
        FILTER_DELAY
      );
    });

    const download = document.createElement('button');
    download.type = 'button';
    download.className = 'jp-DistTrainLog-download jp-Button jp-mod-styled';
    download.textContent = 'Download';
    download.title = 'Download the full log';
    download.addEventListener('click', () => handlers.download());

    this._status.className = 'jp-DistTrainLog-status';
    this._status.setAttribute('role', 'status');

    this.node.append(this._replica, tailSelect, this._follow, this._filter, download, this._status);
  }

  readonly node = document.createElement('div');

  /** The filter as typed. */
  get query(): string {
    return this._filter.value;
  }

  /** The replicas to offer after "All replicas", and the one shown. */
  setReplicas(names: readonly string[], value: string): void {
    const options = names.map(name => {
      const opt = document.createElement('option');
      opt.value = name;
      opt.textContent = name;
      return opt;
    });
    this._replica.replaceChildren(this._replica.options[0], ...options);
    this._replica.value = value;
  }

  /** Show whether new lines scroll into view (following), wait for the end (paused) or not. */
  showFollow(follow: FollowState): void {
    const active = follow.active;
    this._follow.textContent = active ? 'Following' : follow.enabled ? 'Paused' : 'Follow';
    this._follow.setAttribute('aria-pressed', String(active));
    this._follow.title = active
      ? 'New lines scroll into view; scroll up to pause'
      : 'Scroll to the end and follow new lines';
    this._follow.classList.toggle('jp-mod-active', active);
  }

  showStatus(text: string, error: boolean): void {
    this._status.textContent = text;
    this._status.classList.toggle('jp-mod-error', error);
  }

  dispose(): void {
    window.clearTimeout(this._filterTimer);
  }

  private _replica: HTMLSelectElement;
  private _follow = document.createElement('button');
  private _filter = document.createElement('input');
  private _status = document.createElement('span');
  private _filterTimer = 0;
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
