import { sparklineGeometry } from '../render/sparkline';

describe('sparklineGeometry', () => {
  it('spreads the points over the width, 0 at the bottom and the top at the top', () => {
    const g = sparklineGeometry([0, 50, 100], { width: 100, height: 22, max: 100 });
    expect(g.line).toBe('M0 21L50 11L100 1');
    expect(g.area).toBe('M0 22L0 21L50 11L100 1L100 22Z');
    expect(g.last).toEqual({ x: 100, y: 1 });
    expect(g.max).toBe(100);
  });

  it('scales to the series maximum, never below minMax', () => {
    expect(sparklineGeometry([0, 400], { width: 10, height: 12, minMax: 100 }).max).toBe(400);
    const flat = sparklineGeometry([0.1, 0.2], { width: 10, height: 12, minMax: 100 });
    expect(flat.max).toBe(100);
    expect(flat.line).toBe('M0 11L10 11');
  });

  it('clips values above a fixed top and below zero', () => {
    const g = sparklineGeometry([-5, 250], { width: 10, height: 12, max: 100 });
    expect(g.line).toBe('M0 11L10 1');
  });

  it('breaks the line at a gap instead of drawing zero', () => {
    const g = sparklineGeometry([10, 10, null, 10, 10], { width: 40, height: 12, max: 10 });
    expect(g.line).toBe('M0 1L10 1M30 1L40 1');
    expect(g.area.match(/Z/g)).toHaveLength(2);
  });

  it('draws a lone point as a short tick, inside the box', () => {
    expect(sparklineGeometry([5], { width: 40, height: 12, max: 10 }).line).toBe('M40 6L38 6');
    expect(sparklineGeometry([5, null], { width: 40, height: 12, max: 10 }).line).toBe('M0 6L2 6');
  });

  it('draws nothing for an empty or all-missing series', () => {
    for (const values of [[], [null, null]]) {
      const g = sparklineGeometry(values, { width: 40, height: 12 });
      expect(g).toMatchObject({ line: '', area: '', last: null });
    }
  });
});
