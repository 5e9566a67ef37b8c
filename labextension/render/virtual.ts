/**
 * Arithmetic of the virtualised log list: which rows to draw, and whether the user is
 * reading the end (follow) or has scrolled up (pause auto-scroll).
 */

/** Rows `[start, end)` to draw for a viewport, with `overscan` extra rows each side. */
export function visibleRange(
  scrollTop: number,
  viewportHeight: number,
  rowHeight: number,
  total: number,
  overscan = 20
): [number, number] {
  if (total <= 0 || rowHeight <= 0) {
    return [0, 0];
  }
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const count = Math.ceil(Math.max(0, viewportHeight) / rowHeight) + 1;
  const start = Math.max(0, Math.min(total, first) - overscan);
  const end = Math.min(total, first + count + overscan);
  return [start, end];
}

/** True when the viewport shows the last row (within `slack` pixels). */
export function isAtBottom(
  scrollTop: number,
  viewportHeight: number,
  contentHeight: number,
  slack = 4
): boolean {
  return scrollTop + viewportHeight >= contentHeight - slack;
}

/**
 * Follow mode: auto-scroll to new lines, pause while the user reads further up, resume
 * when they come back to the end. Scrolls made by the viewer itself are not the user's.
 */
export class FollowState {
  constructor(public enabled = true) {}

  /** Whether new lines should scroll the view to the end. */
  get active(): boolean {
    return this.enabled && !this.paused;
  }

  paused = false;

  /** The viewer is about to scroll programmatically to `target`. */
  expectScroll(target: number): void {
    this._expected = target;
  }

  /** A scroll event happened; `atBottom` tells where the viewport now is. */
  onScroll(scrollTop: number, atBottom: boolean): void {
    if (this._expected !== null && Math.abs(scrollTop - this._expected) < 2) {
      this._expected = null;
      return;
    }
    this._expected = null;
    this.paused = !atBottom;
  }

  private _expected: number | null = null;
}
