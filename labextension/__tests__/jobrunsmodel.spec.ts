import { JobRunsModel, MAX_SERIES_POINTS, RunSeries, thin } from '../models/jobrunsmodel';
import type { IRunDetail, IRunPoint, IRunQuery, IRunSummary, Phase } from '../rest/types';

function point(step: number, value: number | string = step, flags: string[] = []): IRunPoint {
  return { type: 'train', name: 'loss', value, step, epoch: null, time: step, flags };
}

function summary(phase: Phase): IRunSummary {
  return { job_id: 'j-aaaaa', run: 'r', job_phase: phase, hparams: {} } as IRunSummary;
}

/**
 * A run that grows: `lines[i]` is the i-th line of its metrics file (one point each, 10 bytes
 * a line), `phase` the job's. Answers like the server: the points after byte `since`, at most
 * `page` of them.
 */
function growingRun(page = 1000) {
  const state = {
    lines: [] as IRunPoint[],
    phase: 'Running' as Phase,
    status: 'running',
    queries: [] as IRunQuery[]
  };
  const fetchRuns = async (): Promise<IRunSummary[]> => [
    { ...summary(state.phase), status: state.status }
  ];
  const fetchRun = async (_job: string, _run: string, query: IRunQuery): Promise<IRunDetail> => {
    state.queries.push(query);
    const from = (query.since ?? 0) / 10;
    const points = state.lines.slice(from, from + page);
    return {
      points,
      next: (from + points.length) * 10,
      more: from + points.length < state.lines.length,
      status: state.status,
      artifacts: [],
      progress: { step: null, total_steps: null, eta_seconds: null }
    } as unknown as IRunDetail;
  };
  return { state, fetchRuns, fetchRun };
}

describe('JobRunsModel', () => {
  it('reads each point once, from where the last answer ended', async () => {
    const fake = growingRun();
    const model = new JobRunsModel({ jobId: 'j-aaaaa', ...fake });
    fake.state.lines.push(point(0), point(1));
    await model.refresh();
    fake.state.lines.push(point(2));
    await model.refresh();
    await model.refresh();
    expect(fake.state.queries.map(q => q.since)).toEqual([0, 20, 30]);
    expect(
      model
        .get('r')!
        .series.get('train/loss')!
        .map(p => p.step)
    ).toEqual([0, 1, 2]);
    expect(model.ended).toBe(false);
    model.dispose();
  });

  it('reads to the end once the job has ended, then stops polling', async () => {
    const fake = growingRun(2);
    const model = new JobRunsModel({ jobId: 'j-aaaaa', ...fake, interval: 5 });
    fake.state.lines.push(...[0, 1, 2, 3, 4].map(s => point(s)));
    fake.state.phase = 'Succeeded';
    await model.start();
    while (!model.ended) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(model.get('r')!.series.get('train/loss')).toHaveLength(5);
    expect(model.poll.state.phase).toBe('stopped');
    const calls = fake.state.queries.length;
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(fake.state.queries.length).toBe(calls);
    model.dispose();
  });

  it('stops reading a run that finished while its job runs on, until it is continued', async () => {
    const fake = growingRun();
    const model = new JobRunsModel({ jobId: 'j-aaaaa', ...fake });
    fake.state.lines.push(point(0));
    fake.state.status = 'finished';
    await model.refresh();
    await model.refresh();
    expect(fake.state.queries).toHaveLength(1);
    expect(model.ended).toBe(false); // the job runs: the list is still read
    fake.state.status = 'running'; // the same name again (a restart) continues it
    fake.state.lines.push(point(1));
    await model.refresh();
    expect(fake.state.queries.map(q => q.since)).toEqual([0, 10]);
    expect(model.get('r')!.series.get('train/loss')).toHaveLength(2);
    model.dispose();
  });

  it('stops after one listing of an ended job that has no run', async () => {
    let lists = 0;
    const model = new JobRunsModel({
      jobId: 'j-aaaaa',
      fetchRuns: async () => {
        lists++;
        return [];
      },
      fetchRun: async () => {
        throw new Error('no run');
      }
    });
    await model.refresh();
    expect(model.ended).toBe(false); // an empty list says nothing of the job's phase
    model.markJobEnded();
    await model.refresh();
    expect(model.ended).toBe(true);
    expect(lists).toBe(2);
    model.dispose();
  });
});

describe('series', () => {
  it('thins to the bound, keeping the last point and the marked ones', () => {
    const points = Array.from({ length: 100 }, (_, i) =>
      point(i, i === 33 ? 'NaN' : i, i === 51 ? ['step_backwards'] : [])
    );
    const kept = thin(points, 30);
    expect(kept.length).toBeLessThanOrEqual(30);
    const steps = kept.map(p => p.step);
    expect(steps).toContain(33);
    expect(steps).toContain(51);
    expect(steps[steps.length - 1]).toBe(99);
    expect(steps).toEqual([...steps].sort((a, b) => a! - b!)); // still in order
  });

  it('stays bounded however many points come', () => {
    const series = new RunSeries('j', 'r');
    let next = 0;
    for (let page = 0; page < 50; page++) {
      const points = Array.from({ length: 1000 }, () => point(next++));
      series.add({ points, next: next * 10, more: false } as unknown as IRunDetail);
    }
    const loss = series.series.get('train/loss')!;
    expect(loss.length).toBeLessThanOrEqual(MAX_SERIES_POINTS);
    expect(loss[loss.length - 1].step).toBe(49999);
    expect(loss[0].step).toBe(0);
  });
});
