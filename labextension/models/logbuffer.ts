/**
 * The log viewer's model: lines assembled from API pages, with progress bars collapsed.
 *
 * A chunk whose text ends with `\r` (tqdm redrawing its bar) is provisional: the next chunk
 * of the same replica replaces it, so a bar that redraws ten thousand times is one line.
 * Lines are kept as plain strings (no DOM, no parsed ANSI) so a million of them stay cheap;
 * the view renders only the rows on screen.
 */
import type { ILogLine } from '../rest/types';
import { stripAnsi } from '../render/ansi';

/** The text a chunk shows: line ending removed and, after `\r` redraws, the last drawing. */
export function displayText(raw: string): string {
  let text = raw;
  while (text.endsWith('\n') || text.endsWith('\r')) {
    text = text.slice(0, -1);
  }
  const cut = text.lastIndexOf('\r');
  return cut < 0 ? text : text.slice(cut + 1);
}

/** `[rank0] ` for a rank, `[worker-1] ` for a named replica. */
export function linePrefix(line: ILogLine): string {
  return line.rank !== null && line.rank !== undefined
    ? `[rank${line.rank}] `
    : `[${line.replica}] `;
}

export class LogBuffer {
  /**
   * @param prefix - put the replica/rank in front of each line (all replicas interleaved)
   */
  constructor(readonly prefix: boolean) {}

  /** Number of display lines. */
  get length(): number {
    return this._texts.length;
  }

  /** Resume token after the last chunk received ('' before any). */
  get offset(): string {
    return this._offset;
  }

  set offset(value: string) {
    this._offset = value;
  }

  /** Display text of line `i` (with prefix, ANSI codes kept for rendering). */
  line(i: number): string {
    return this._texts[i];
  }

  /** Replica that wrote line `i`. */
  replica(i: number): string {
    return this._replicas[i];
  }

  /**
   * Add chunks in order.
   *
   * @returns the smallest index that was added or rewritten (`length` when nothing changed)
   */
  append(lines: ILogLine[], offset?: string): number {
    let first = this._texts.length;
    for (const chunk of lines) {
      const shown = displayText(chunk.text);
      const text = (this.prefix ? linePrefix(chunk) : '') + shown;
      const provisional = chunk.text.endsWith('\r');
      const at = this._pending.get(chunk.replica);
      if (at !== undefined) {
        // like a terminal: an empty chunk (the bar's closing newline) leaves the bar as drawn
        if (shown !== '') {
          this._texts[at] = text;
          first = Math.min(first, at);
        }
        if (!provisional) {
          this._pending.delete(chunk.replica);
        }
      } else {
        if (provisional) {
          this._pending.set(chunk.replica, this._texts.length);
        }
        this._texts.push(text);
        this._replicas.push(chunk.replica);
      }
      this._offset = chunk.offset;
    }
    if (offset !== undefined) {
      this._offset = offset;
    }
    return first;
  }

  /**
   * Indices of lines containing `query` (case-insensitive, ANSI codes ignored), from `from`.
   */
  search(query: string, from = 0): number[] {
    const q = query.toLowerCase();
    const out: number[] = [];
    for (let i = from; i < this._texts.length; i++) {
      if (stripAnsi(this._texts[i]).toLowerCase().includes(q)) {
        out.push(i);
      }
    }
    return out;
  }

  clear(): void {
    this._texts = [];
    this._replicas = [];
    this._pending.clear();
    this._offset = '';
  }

  private _texts: string[] = [];
  private _replicas: string[] = [];
  private _pending = new Map<string, number>();
  private _offset = '';
}

/**
 * The lines a filter lets through, kept up to date incrementally as lines arrive.
 */
export class FilteredView {
  constructor(
    readonly buffer: LogBuffer,
    query = ''
  ) {
    this.setQuery(query);
  }

  get query(): string {
    return this._query;
  }

  /** Number of visible rows. */
  get length(): number {
    return this._indices ? this._indices.length : this.buffer.length;
  }

  /** Buffer index of visible row `row`. */
  index(row: number): number {
    return this._indices ? this._indices[row] : row;
  }

  setQuery(query: string): void {
    this._query = query;
    this._indices = query ? this.buffer.search(query) : null;
  }

  /** Account for lines added or rewritten from buffer index `first` on. */
  update(first: number): void {
    if (!this._indices) {
      return;
    }
    // drop matches at or after `first` (they may have been rewritten), then rescan
    let lo = 0;
    let hi = this._indices.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this._indices[mid] < first) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    this._indices.length = lo;
    for (const i of this.buffer.search(this._query, first)) {
      this._indices.push(i);
    }
  }

  private _query = '';
  private _indices: number[] | null = null;
}

/** The raw text of chunks as a file would hold it (for downloads). */
export function rawText(lines: ILogLine[]): string {
  return lines
    .map(l => (l.text.endsWith('\n') || l.text.endsWith('\r') ? l.text : l.text + '\n'))
    .join('');
}
