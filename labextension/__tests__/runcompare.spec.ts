import { ComparePoints } from '../models/comparepoints';
import {
  differingHparams,
  dotPlot,
  emaSmooth,
  hparamDots,
  linePlot,
  runLabels,
  seriesPoints
} from '../models/runcompare';
import { RunsTableModel } from '../models/runsmodel';
import type { IRunDetail, IRunPoint } from '../rest/types';
import { run } from './runfixture';

function point(
  step: number | null,
  value: number | string,
  time = 0,
  epoch: number | null = null
): IRunPoint {
  return { type: 'train', name: 'loss', value, step, epoch, time, flags: [] };
}

describe('differing hparams', () => {
  it('names only the hparams whose values are not all the same (a missing one differs)', () => {
    const runs = [
      run('a', 'r1', { lr: 0.1, layers: 2, opt: { name: 'adam' } }),
      run('a', 'r2', { lr: 0.01, layers: 2, opt: { name: 'adam' }, seed: 1 })
    ];
    expect([...differingHparams(runs)].sort()).toEqual(['lr', 'seed']);
    expect(differingHparams(runs.slice(0, 1)).size).toBe(0);
  });

  it('hides the identical hparam columns of the selected runs unless all are asked for', () => {
    const runs = [
      run('a', 'r1', { lr: 0.1, layers: 2 }),
      run('a', 'r2', { lr: 0.01, layers: 2 }),
      run('a', 'r3', { lr: 0.01, layers: 3 })
    ];
    const model = new RunsTableModel({ fetchRuns: async () => runs });
    model.set(runs);
    const hparams = () => model.columns.filter(c => c.kind === 'hparam').map(c => c.key);
    expect(hparams()).toEqual(['hp:layers', 'hp:lr']); // among the rows shown, both differ
    model.select(runs[0], true);
    expect(hparams()).toEqual(['hp:layers', 'hp:lr']); // one selected: still the rows
    model.select(runs[1], true);
    expect(hparams()).toEqual(['hp:lr']);
    expect([...model.hiddenHparams]).toEqual(['hp:layers']);
    model.allHparams = true;
    expect(hparams()).toEqual(['hp:layers', 'hp:lr']);
    // the metric columns stay
    model.dispose();
  });
});

describe('smoothing', () => {
  it('is TensorBoard’s debiased moving average, off at 0', () => {
    expect(emaSmooth([1, 2, 3], 0)).toEqual([1, 2, 3]);
    const s = emaSmooth([1, 1, 1], 0.9);
    s.forEach(v => expect(v).toBeCloseTo(1)); // debiased: a constant stays itself
    const t = emaSmooth([0, 10], 0.5);
    expect(t[0]).toBeCloseTo(0);
    expect(t[1]).toBeCloseTo((0.5 * 10) / (1 - 0.25)); // 6.667
  });

  it('lets a NaN through without letting it into the average', () => {
    const s = emaSmooth([2, NaN, 2], 0.6);
    expect(Number.isNaN(s[1])).toBe(true);
    expect(s[2]).toBeCloseTo(2);
  });
});

describe('series', () => {
  const points = [
    point(0, 4, 100, 0),
    point(1, 'NaN', 101, 0),
    point(2, 2, 103, 1),
    point(null, 1, 104)
  ];

  it('takes x from the step, the epoch or the seconds since the first point', () => {
    expect(seriesPoints(points, 'step')).toEqual([
      { x: 0, y: 4 },
      { x: 2, y: 2 }
    ]);
    expect(seriesPoints(points, 'epoch').map(p => p.x)).toEqual([0, 1]);
    expect(seriesPoints(points, 'time').map(p => p.x)).toEqual([0, 3, 4]);
  });

  it('smooths before leaving points out', () => {
    const smooth = seriesPoints(points, 'time', 0.5);
    expect(smooth[0].y).toBeCloseTo(4);
    expect(smooth[1].y).toBeCloseTo((0.25 * 4 + 0.5 * 2) / 0.75);
  });

  it('draws every run on one scale, and names runs by job only when several jobs are shown', () => {
    const plot = linePlot(
      [
        {
          key: 'a',
          label: 'a',
          points: [
            { x: 0, y: 1 },
            { x: 10, y: 0 }
          ]
        },
        { key: 'b', label: 'b', points: [{ x: 0, y: 2 }] },
        { key: 'c', label: 'c', points: [] }
      ],
      { width: 110, height: 110, left: 10, bottom: 10, pad: 0 }
    );
    expect(plot.paths).toEqual(['M10 50 L110 100', 'M10 0', '']);
    const one = [run('a', 'r1', {}), run('a', 'r2', {})];
    expect([...runLabels(one).values()]).toEqual(['r1', 'r2']);
    expect([...runLabels([one[0], run('b', 'r1', {})]).values()]).toEqual(['a/r1', 'b/r1']);
  });
});

describe('hparam against a final metric', () => {
  const runs = [
    run('a', 'r1', { lr: 0.1, opt: 'sgd' }, { 'train/loss': 0.5 }),
    run('a', 'r2', { lr: 0.001, opt: 'adam' }, { 'train/loss': 0.25 }),
    run('a', 'r3', { lr: 0.01, opt: 'adam' }, { 'train/loss': 'NaN' }),
    run('a', 'r4', {}, { 'train/loss': 1 })
  ];

  it('is a dot per run with both, on a log scale over two decades', () => {
    const { dots, categories } = hparamDots(runs, 'lr', 'train/loss');
    expect(categories).toBeNull();
    expect(dots.map(d => [d.label, d.x, d.y])).toEqual([
      ['r1', 0.1, 0.5],
      ['r2', 0.001, 0.25]
    ]);
    const plot = dotPlot(dots, categories);
    expect(plot.x.log).toBe(true);
    expect(plot.at[0].x).toBeGreaterThan(plot.at[1].x);
    expect(plot.at[0].y).toBeLessThan(plot.at[1].y); // the larger loss higher up
  });

  it('makes categories of values that are not numbers', () => {
    const { dots, categories } = hparamDots(runs, 'opt', 'train/loss');
    expect(categories).toEqual(['adam', 'sgd']);
    expect(dots.map(d => d.x)).toEqual([1, 0]);
  });
});

describe('the points of the compared runs', () => {
  function page(points: IRunPoint[], next: number, more: boolean): IRunDetail {
    return {
      job_id: 'a-abcde',
      run: 'r1',
      status: 'running',
      record: {},
      points,
      next,
      more,
      artifacts: [],
      progress: { step: null, total_steps: null, eta_seconds: null },
      ranks: [0],
      resumed_at: []
    };
  }

  it('reads each run on from where it ended, to the end once its job has ended', async () => {
    const asked: number[] = [];
    const pages: Record<number, IRunDetail> = {
      0: page([point(0, 1)], 10, true),
      10: page([point(1, 0.5)], 20, false),
      20: page([point(2, 0.25)], 30, false)
    };
    const points = new ComparePoints(async (_job, _run, q) => {
      asked.push(q.since ?? 0);
      return pages[q.since ?? 0];
    });
    const running = run('a', 'r1', {}, {}, 'Running');
    await points.load([running]);
    expect(asked).toEqual([0, 10]);
    expect(
      points
        .get(running)!
        .series.get('train/loss')!
        .map(p => p.step)
    ).toEqual([0, 1]);
    await points.load([{ ...running, job_phase: 'Succeeded' }]);
    expect(asked).toEqual([0, 10, 20]);
    await points.load([{ ...running, job_phase: 'Succeeded' }]); // done: nothing more to read
    expect(asked).toEqual([0, 10, 20]);
    await points.load([]);
    expect(points.get(running)).toBeUndefined();
  });
});
