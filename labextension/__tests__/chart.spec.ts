import { chartGeometry } from '../render/chart';
import type { IRunPoint } from '../rest/types';

const size = { width: 108, height: 58, pad: 4 };

function p(step: number | null, value: number | string, flags: string[] = []): IRunPoint {
  return { type: 'train', name: 'loss', value, step, epoch: null, time: 0, flags };
}

describe('chartGeometry', () => {
  it('maps steps to x and values to y, the largest value at the top', () => {
    const g = chartGeometry([p(0, 1), p(5, 0.5), p(10, 0)], size);
    expect(g.path).toBe('M4 4 L54 29 L104 54');
    expect([g.min, g.max, g.xMin, g.xMax]).toEqual([0, 1, 0, 10]);
    expect(g.marks).toEqual([]);
    expect(g.dots).toEqual([]);
  });

  it('breaks the line at NaN and infinities and marks them at the edges', () => {
    const g = chartGeometry(
      [p(0, 1), p(1, 'NaN'), p(2, 2), p(3, 'Infinity'), p(4, '-Infinity'), p(5, 3)],
      size
    );
    expect(g.path.split('M')).toHaveLength(4); // three pieces: 1 | 2 | 3
    expect(g.dots).toHaveLength(3); // each alone between non-finite points: a dot
    expect(g.marks.map(m => [m.kind, m.y])).toEqual([
      ['nan', 54],
      ['inf', 4],
      ['-inf', 54]
    ]);
    expect(g.marks[1].label).toBe('step 3: ∞');
    expect([g.min, g.max]).toEqual([1, 3]);
  });

  it('marks a step that went back, and draws the line back to it', () => {
    const g = chartGeometry([p(0, 0), p(10, 1), p(5, 2, ['step_backwards'])], size);
    expect(g.marks).toEqual([
      { x: 54, y: 4, kind: 'backwards', label: 'step 5: 2 (the step went back)' }
    ]);
    expect(g.path).toBe('M4 54 L104 29 L54 4');
  });

  it('draws a flat line in the middle and uses the index without steps', () => {
    const g = chartGeometry([p(null, 2), p(null, 2)], size);
    expect(g.path).toBe('M4 29 L104 29');
    expect(chartGeometry([], size).path).toBe('');
  });
});

describe('chartGeometry of a resumed run', () => {
  it('puts a marker at each resume step on the step axis, none outside the line', () => {
    const points = [p(0, 1), p(5, 0.5), p(10, 0)];
    const g = chartGeometry(points, size, [5, 20]);
    expect(g.resumes).toEqual([{ x: 54, step: 5 }]);
    expect(g.path).toBe('M4 4 L54 29 L104 54'); // still one line
    expect(chartGeometry(points, size).resumes).toEqual([]);
  });

  it('draws no marker where x is the point index (no steps)', () => {
    expect(chartGeometry([p(null, 1), p(null, 2)], size, [1]).resumes).toEqual([]);
  });
});
