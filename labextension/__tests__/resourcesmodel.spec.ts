import { formatBytes, formatPercent } from '../render/format';
import {
  measureMax,
  MEASURES,
  mergeSamples,
  nextSince,
  ResourcesModel
} from '../models/resourcesmodel';
import type { IResources, IReplicaResources, IResourceSample } from '../rest/types';

function sample(t: number, extra: Partial<IResourceSample> = {}): IResourceSample {
  return {
    t,
    cpu_percent: 10 * t,
    rss_bytes: 1024 ** 2 * t,
    threads: 4,
    read_bytes: 0,
    write_bytes: 0,
    ...extra
  };
}

function replica(samples: IResourceSample[], more: Partial<IReplicaResources> = {}) {
  return { samples, ended: false, last_output: null, last_progress: null, quiet: false, ...more };
}

function answer(
  replicas: Record<string, IReplicaResources>,
  more: Partial<IResources> = {}
): IResources {
  return { interval: 2, now: 100, source: 'sampler', message: null, replicas, ...more };
}

const measure = (key: string) => MEASURES.find(m => m.key === key)!;

/** A server whose answers the test scripts, recording the `since` of each call. */
function server(answers: (IResources | Error)[]) {
  const since: (number | undefined)[] = [];
  return {
    since,
    fetchResources: async (_id: string, s?: number): Promise<IResources> => {
      const next = answers[Math.min(since.length, answers.length - 1)];
      since.push(s);
      if (next instanceof Error) {
        throw next;
      }
      return next;
    }
  };
}

describe('resource measures', () => {
  it('reads GPU measures only where the sample has GPUs (absent is null, not 0)', () => {
    const cpuOnly = sample(1);
    const gpu = sample(2, {
      gpus: [
        { index: 0, util_percent: 80, mem_used_bytes: 2e9, mem_total_bytes: 16e9 },
        { index: 1, util_percent: 40, mem_used_bytes: 1e9, mem_total_bytes: 16e9 }
      ]
    });
    expect(measure('gpu').value(cpuOnly)).toBeNull();
    expect(measure('gpuMemory').value(cpuOnly)).toBeNull();
    expect(measure('gpu').value({ ...cpuOnly, gpus: [] })).toBeNull();
    expect(measure('gpu').value(gpu)).toBe(60);
    expect(measure('gpuMemory').value(gpu)).toBe(3e9);
    // the rank's own GPU memory, when the sampler knows it, wins over the devices' total use
    expect(measure('gpuMemory').value({ ...gpu, gpu_mem_bytes: 5e8 })).toBe(5e8);
    expect(measureMax(measure('gpuMemory'), [gpu])).toBe(32e9);
    expect(measureMax(measure('cpu'), [sample(1, { cpu_percent: 180 })])).toBe(180);
    expect(measureMax(measure('cpu'), [sample(1, { cpu_percent: 3 })])).toBe(100);
  });

  it('formats bytes and percentages', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(300 * 1024 ** 2)).toBe('300 MB');
    expect(formatBytes(1.5 * 1024 ** 3)).toBe('1.50 GB');
    expect(formatBytes(12.34 * 1024 ** 2)).toBe('12.3 MB');
    expect(formatPercent(0.42)).toBe('0.4 %');
    expect(formatPercent(0)).toBe('0 %');
    expect(formatPercent(187.6)).toBe('188 %');
  });
});

describe('incremental samples', () => {
  it('merges new samples after the kept ones, drops repeats and keeps a bounded window', () => {
    const kept = [sample(1), sample(2), sample(3)];
    expect(mergeSamples(kept, [sample(2), sample(3), sample(4)], 10).map(s => s.t)).toEqual([
      1, 2, 3, 4
    ]);
    expect(mergeSamples(kept, [sample(4), sample(5)], 3).map(s => s.t)).toEqual([3, 4, 5]);
    expect(mergeSamples(kept, [], 2).map(s => s.t)).toEqual([2, 3]);
  });

  it('reads on from the live replica furthest behind; from the newest once all ended', () => {
    const r = (ts: number[], ended = false) =>
      replica(
        ts.map(t => sample(t)),
        { ended }
      );
    expect(nextSince(new Map())).toBeUndefined();
    expect(
      nextSince(
        new Map([
          ['rank-0', r([1, 2, 5])],
          ['rank-1', r([1, 4])],
          ['rank-2', r([1, 2], true)], // ended: its series is over
          ['rank-3', r([])] // not sampled yet: does not hold the others back
        ])
      )
    ).toBe(4);
    expect(
      nextSince(
        new Map([
          ['rank-0', r([1, 7], true)],
          ['rank-1', r([1, 4], true)]
        ])
      )
    ).toBe(7);
  });
});

describe('ResourcesModel', () => {
  it('polls incrementally, keeps the window, orders replicas by rank and knows the measures', async () => {
    const fake = server([
      answer({ 'rank-10': replica([sample(1)]), 'rank-2': replica([sample(1), sample(2)]) }),
      answer(
        {
          'rank-10': replica([sample(3)]),
          'rank-2': replica([sample(3)], { quiet: true, last_output: 90 })
        },
        { interval: 5, now: 104 }
      )
    ]);
    const model = new ResourcesModel({ jobId: 'j-1', ...fake, window: 2 });
    let changes = 0;
    model.changed.connect(() => changes++);
    await model.refresh();
    expect([...model.replicas.keys()]).toEqual(['rank-2', 'rank-10']);
    expect(model.measures().map(m => m.key)).toEqual(['cpu', 'memory']);
    await model.refresh();
    expect(fake.since).toEqual([undefined, 1]);
    expect(model.series('rank-10', measure('cpu'))).toEqual([10, 30]);
    expect(model.series('rank-2', measure('cpu'))).toEqual([20, 30]); // window of 2
    expect(model.current('rank-2')?.t).toBe(3);
    expect(model.current('nobody')).toBeNull();
    expect(model.quiet()).toEqual(['rank-2']);
    expect(model.now).toBe(104);
    // no faster than the sampler writes
    expect(model.poll.frequency.interval).toBe(5000);
    expect(changes).toBe(2);
    model.dispose();
  });

  it('shows GPU measures once a sample has a GPU', async () => {
    const gpus = [{ index: 0, util_percent: 50, mem_used_bytes: 1, mem_total_bytes: 2 }];
    const model = new ResourcesModel({
      jobId: 'j-1',
      ...server([answer({ 'rank-0': replica([sample(1), sample(2, { gpus })]) })])
    });
    await model.refresh();
    expect(model.measures().map(m => m.key)).toEqual(['cpu', 'memory', 'gpu', 'gpuMemory']);
    expect(model.series('rank-0', measure('gpu'))).toEqual([null, 50]);
    model.dispose();
  });

  it('reports an error and keeps the samples it had', async () => {
    const model = new ResourcesModel({
      jobId: 'j-1',
      ...server([answer({ 'rank-0': replica([sample(1)]) }), new Error('job j-1 not found')])
    });
    await model.refresh();
    await expect(model.refresh()).rejects.toThrow('not found');
    expect(model.error).toBe('job j-1 not found');
    expect(model.series('rank-0', measure('cpu'))).toEqual([10]);
    model.dispose();
  });

  it('stops after the first read begun once the job ended', async () => {
    let ended = false;
    const fake = server([answer({ 'rank-0': replica([sample(1)]) }, { interval: 0 })]);
    const model = new ResourcesModel({ jobId: 'j-1', ...fake, interval: 5, ended: () => ended });
    await model.start();
    while (fake.since.length < 2) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    expect(model.done).toBe(false);
    ended = true;
    while (!model.done) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    const calls = fake.since.length;
    await new Promise(resolve => setTimeout(resolve, 40));
    expect(fake.since.length).toBe(calls);
    expect(model.poll.state.phase).toBe('stopped');
    await model.start(); // a no-op once done
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(fake.since.length).toBe(calls);
    model.dispose();
  });
});
