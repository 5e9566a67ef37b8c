import {
  compareCells,
  matchesFilter,
  runLabel,
  RunsTableModel,
  tensorboardRunFilter
} from '../models/runsmodel';
import { ROWS_PAGE } from '../render/paging';
import type { IRunSummary } from '../rest/types';
import { run } from './runfixture';

const RUNS = [
  run('mnist', 'run-10', { lr: 0.1, opt: 'adam' }, { 'train/loss': 0.5, 'val/acc': 0.9 }),
  run('mnist', 'run-2', { lr: 0.01, opt: 'sgd' }, { 'train/loss': 'NaN' }),
  run('cifar', 'base', { lr: 0.05, batch: 64 }, { 'train/loss': 0.25 })
];

/** Which of the TensorBoard run `names` the filter of the `selected` runs lets through. */
function shownInTensorBoard(
  runs: IRunSummary[],
  selected: IRunSummary[],
  names: string[]
): string[] {
  const model = new RunsTableModel({ fetchRuns: async () => runs });
  model.set(runs);
  selected.forEach(r => model.select(r, true));
  const regex = new RegExp(model.tensorboardFilter!, 'i'); // as TensorBoard applies it
  model.dispose();
  return names.filter(n => regex.test(n));
}

describe('runs table', () => {
  it('has the fixed columns, then every hparam and every metric once', () => {
    const model = new RunsTableModel({ fetchRuns: async () => RUNS });
    model.set(RUNS);
    const keys = model.columns.map(c => c.key);
    expect(keys.slice(0, 3)).toEqual(['run', 'job', 'phase']);
    expect(keys.filter(k => k.startsWith('hp:'))).toEqual(['hp:batch', 'hp:lr', 'hp:opt']);
    expect(keys.filter(k => k.startsWith('m:'))).toEqual(['m:train/loss', 'm:val/acc']);
    model.dispose();
  });

  it('sorts numbers by value (NaN after them, empty cells last), text naturally', () => {
    const model = new RunsTableModel({ fetchRuns: async () => RUNS });
    model.set(RUNS);
    model.sortBy('m:train/loss');
    expect(model.rows.map(r => r.run)).toEqual(['base', 'run-10', 'run-2']);
    model.sortBy('m:train/loss'); // again: the other way
    expect(model.sort).toEqual({ key: 'm:train/loss', ascending: false });
    expect(model.rows.map(r => r.run)).toEqual(['run-2', 'run-10', 'base']);
    model.sortBy('run');
    expect(model.rows.map(r => r.run)).toEqual(['base', 'run-2', 'run-10']);
    model.sortBy('m:val/acc');
    expect(model.rows.map(r => r.run)).toEqual(['run-10', 'run-2', 'base']); // stable for empties
    model.dispose();
  });

  it('compares mixed cells in a fixed order', () => {
    const sorted = [undefined, 'b', 'NaN', 3, '-Infinity', 'a', 1].sort(compareCells);
    expect(sorted).toEqual(['-Infinity', 1, 3, 'NaN', 'a', 'b', undefined]);
  });

  it('filters on every word: run, job and hparams as name=value', () => {
    expect(matchesFilter(RUNS[0], 'MNIST adam')).toBe(true);
    expect(matchesFilter(RUNS[0], 'mnist sgd')).toBe(false);
    expect(matchesFilter(RUNS[1], 'lr=0.01')).toBe(true);
    expect(matchesFilter(RUNS[2], 'batch=64')).toBe(true);
    expect(matchesFilter(RUNS[2], '  ')).toBe(true);
    const model = new RunsTableModel({ fetchRuns: async () => RUNS });
    model.set(RUNS);
    model.filter = 'mnist';
    expect(model.rows.map(r => r.run)).toEqual(['run-10', 'run-2']);
    model.dispose();
  });

  it('selects shown runs, keeps a hidden selection, drops runs that are gone', () => {
    const model = new RunsTableModel({ fetchRuns: async () => RUNS });
    model.set(RUNS);
    model.filter = 'cifar';
    model.selectShown(true);
    model.filter = '';
    model.select(RUNS[0], true);
    expect(model.selected.map(r => r.run)).toEqual(['run-10', 'base']);
    model.set(RUNS.slice(1));
    expect(model.selected.map(r => r.run)).toEqual(['base']);
    model.dispose();
  });

  it("builds TensorBoard's run filter of exactly the selected runs", () => {
    const model = new RunsTableModel({ fetchRuns: async () => RUNS });
    model.set(RUNS);
    expect(model.tensorboardFilter).toBeNull();
    model.dispose();
    const names = [
      'mnist-abcde/tensorboard/run-10',
      'mnist-abcde/tensorboard/run-10/rank-1', // a run every rank recorded
      'cifar-abcde/tensorboard/base',
      'mnist-abcde/tensorboard/run-1', // a prefix
      'mnist-abcde/tensorboard/run-100', // an extension
      'mnist-abcde/tensorboard/run-2',
      'mnist-abcde/tensorboard',
      'x/mnist-abcde/tensorboard/run-10'
    ];
    expect(shownInTensorBoard(RUNS, [RUNS[0], RUNS[2]], names)).toEqual(names.slice(0, 3));
  });

  it("shows every run of a job's TensorBoard dir for the job's own row (no run of em)", () => {
    const job = {
      ...run('plain', '_job', { lr: 1 }, {}),
      tensorboard_run: 'plain-abcde/tensorboard'
    };
    expect(runLabel(job.run)).toBe('(job)');
    const names = [
      'plain-abcde/tensorboard',
      'plain-abcde/tensorboard/lightning_logs/version_0',
      'cifar-abcde/tensorboard/base',
      'plain-abcde/tensorboard2',
      'cifar-abcde/tensorboard/base/other'
    ];
    expect(shownInTensorBoard([job, ...RUNS], [job, RUNS[2]], names)).toEqual(names.slice(0, 3));
  });

  it('escapes the characters a regex gives a meaning to', () => {
    const regex = new RegExp(tensorboardRunFilter(['j/tensorboard/a.b+c']));
    expect(regex.test('j/tensorboard/a.b+c')).toBe(true);
    expect(regex.test('j/tensorboard/aXbbc')).toBe(false);
  });

  it('refreshes less often while no job runs', () => {
    const model = new RunsTableModel({ fetchRuns: async () => RUNS, interval: 1000 });
    model.set([run('live', 'r', {}, {}, 'Running'), ...RUNS]);
    expect(model.poll.frequency.interval).toBe(1000);
    model.set(RUNS);
    expect(model.poll.frequency.interval).toBe(5000);
    model.dispose();
  });

  it('keeps the last runs and reports an error until the next success', async () => {
    const answers: (IRunSummary[] | Error)[] = [RUNS, new Error('server down'), RUNS.slice(2)];
    let calls = 0;
    const model = new RunsTableModel({
      fetchRuns: async () => {
        const answer = answers[calls++];
        if (answer instanceof Error) {
          throw answer;
        }
        return answer;
      }
    });
    await model.refresh();
    await expect(model.refresh()).rejects.toThrow('server down');
    expect(model.error).toBe('server down');
    expect(model.runs).toHaveLength(3);
    await model.refresh();
    expect(model.error).toBeNull();
    expect(model.runs.map(r => r.run)).toEqual(['base']);
    model.dispose();
  });

  it('draws the first page of a long list; ticked runs past it stay compared', () => {
    const many = Array.from({ length: 2 * ROWS_PAGE + 50 }, (_, i) =>
      run('sweep', `run-${i}`, { lr: i }, { 'train/loss': 1 / (i + 1) })
    );
    const model = new RunsTableModel({ fetchRuns: async () => many });
    model.set(many);
    let changes = 0;
    model.changed.connect(() => changes++);
    expect(model.limit).toBe(ROWS_PAGE);
    // the last of the list, not drawn: a sort brings it into the first page
    const last = many[many.length - 1];
    model.select(last, true);
    model.select(many[0], true);
    expect(model.selected.map(r => r.run)).toEqual(['run-0', `run-${many.length - 1}`]);
    model.sortBy('m:train/loss');
    expect(model.rows.slice(0, model.limit)[0]).toBe(last);
    model.showMore();
    expect(model.limit).toBe(2 * ROWS_PAGE);
    expect(changes).toBe(4);
    // the filter still searches every run, drawn or not
    model.filter = `run-${many.length - 2}`;
    expect(model.rows.map(r => r.run)).toEqual([`run-${many.length - 2}`]);
    model.dispose();
  });
});
