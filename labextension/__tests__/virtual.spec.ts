import { FollowState, isAtBottom, visibleRange } from '../render/virtual';

describe('visibleRange', () => {
  it('draws only the rows in view plus overscan, whatever the total', () => {
    expect(visibleRange(0, 170, 17, 1_000_000, 5)).toEqual([0, 16]);
    const [start, end] = visibleRange(17 * 500_000, 170, 17, 1_000_000, 5);
    expect([start, end]).toEqual([499_995, 500_016]);
    expect(visibleRange(17 * 999_995, 170, 17, 1_000_000, 5)).toEqual([999_990, 1_000_000]);
    expect(visibleRange(0, 170, 17, 0)).toEqual([0, 0]);
    expect(visibleRange(10_000, 170, 17, 3, 2)).toEqual([1, 3]);
  });
});

describe('FollowState', () => {
  it('pauses when the user scrolls up, resumes at the end, ignores its own scrolls', () => {
    const f = new FollowState(true);
    expect(f.active).toBe(true);
    f.expectScroll(1000);
    f.onScroll(1000, true);
    expect(f.active).toBe(true);
    f.onScroll(400, isAtBottom(400, 200, 1200));
    expect(f.active).toBe(false);
    expect(f.paused).toBe(true);
    f.onScroll(1000, isAtBottom(1000, 200, 1200));
    expect(f.active).toBe(true);
    // our own scroll to the end is not a user scroll even when content grew meanwhile
    f.expectScroll(5000);
    f.onScroll(5000, false);
    expect(f.active).toBe(true);
  });

  it('stays off when disabled', () => {
    const f = new FollowState(false);
    f.onScroll(0, true);
    expect(f.active).toBe(false);
  });
});
