import {
  checkpointActionStates,
  checkpointCells,
  checkpointName,
  CheckpointsModel,
  errorLine,
  READS_AFTER_END,
  formatCheckpointMetrics,
  resumedFromText,
  usageText
} from '../models/checkpointsmodel';
import type { ICheckpoint, ICheckpointList } from '../rest/types';

function checkpoint(overrides: Partial<ICheckpoint> = {}): ICheckpoint {
  return {
    id: 'c0123456789ab',
    path: '/jobs/j-aaaaa/checkpoints/step_40.pt',
    kind: 'torch',
    step: 40,
    epoch: 2,
    time: null,
    size: 1536,
    complete: true,
    metrics: { 'train/loss': 0.123456, 'val/acc': 0.9 },
    run: 'mnist',
    declared: false,
    step_source: 'name',
    world_size: null,
    pinned: false,
    ...overrides
  };
}

function listing(checkpoints: ICheckpoint[]): ICheckpointList {
  return {
    job_id: 'j-aaaaa',
    dir: '/jobs/j-aaaaa/checkpoints',
    checkpoints,
    usage: { count: checkpoints.length, complete: 0, bytes: 0, keep: 0, latest: null, more: false },
    resumed_from: null
  };
}

describe('checkpoint formatting', () => {
  it('names a checkpoint by step, else epoch, else id', () => {
    expect(checkpointName(checkpoint())).toBe('step 40');
    expect(checkpointName(checkpoint({ step: null }))).toBe('epoch 2');
    expect(checkpointName(checkpoint({ step: null, epoch: null }))).toBe('c0123456789ab');
  });

  it('gives each column a cell: sizes, states, metrics sorted and rounded, pinned', () => {
    expect(checkpointCells(checkpoint())).toEqual({
      Step: '40',
      Epoch: '2',
      Kind: 'torch',
      Time: '–',
      Size: '1.50 KB',
      State: 'complete',
      Metrics: 'train/loss=0.1235 val/acc=0.9',
      Pinned: ''
    });
    const cells = checkpointCells(
      checkpoint({ step: null, epoch: null, complete: false, pinned: true, metrics: {} })
    );
    expect([cells.Step, cells.Epoch, cells.State, cells.Metrics, cells.Pinned]).toEqual([
      '–',
      '–',
      'being written',
      '–',
      'pinned'
    ]);
    expect(formatCheckpointMetrics({ b: 'NaN', a: 2 })).toBe('a=2 b=NaN');
  });

  it('says the disk used, how many are complete, and --keep-checkpoints when set', () => {
    const usage = {
      count: 3,
      complete: 3,
      bytes: 3 * 1024 * 1024,
      keep: 0,
      latest: 'c1',
      more: false
    };
    expect(usageText(usage)).toBe('3 checkpoints use 3.00 MB');
    expect(usageText({ ...usage, count: 1, complete: 1 })).toBe('1 checkpoint use 3.00 MB');
    expect(usageText({ ...usage, complete: 2, keep: 2 })).toBe(
      '3 checkpoints (2 complete) use 3.00 MB · --keep-checkpoints 2: keeps the newest 2'
    );
  });

  it('says when the listing stopped before the end of what there is', () => {
    const usage = { count: 5000, complete: 5000, bytes: 1024, keep: 0, latest: 'c1', more: true };
    expect(usageText(usage)).toBe(
      'at least 5000 checkpoints use 1.00 KB · more not listed (too many files to look at)'
    );
  });

  it('says where a resumed job started from', () => {
    const from = {
      job: 'j-old',
      checkpoint: 'c1',
      step: 40,
      kind: 'torch',
      path: '/p',
      job_dir: '/d'
    };
    expect(resumedFromText(from)).toBe('resumed from j-old:40');
    expect(resumedFromText({ ...from, step: null })).toBe('resumed from j-old:c1');
  });

  it("keeps the first line of an error (the server's one-line reason)", () => {
    expect(errorLine(new Error('checkpoint step 7 not found\ndetails'))).toBe(
      'checkpoint step 7 not found'
    );
    expect(errorLine('plain')).toBe('plain');
  });
});

describe('checkpointActionStates', () => {
  it('enables every action on a complete checkpoint', () => {
    const states = checkpointActionStates(checkpoint());
    expect([states.download.enabled, states.load.enabled, states.resume.enabled]).toEqual([
      true,
      true,
      true
    ]);
    expect(states.resume.title).toBe("Run this job's script again from step 40");
  });

  it('disables Resume (and download and load) while the checkpoint is being written', () => {
    const states = checkpointActionStates(checkpoint({ complete: false }));
    expect(states.resume).toEqual({
      enabled: false,
      title: 'step 40 is still being written: wait until it is complete'
    });
    expect(states.download.enabled).toBe(false);
    expect(states.load.enabled).toBe(false);
  });
});

describe('CheckpointsModel', () => {
  it('keeps the last listing, reports and clears errors', async () => {
    const answers: (ICheckpointList | Error)[] = [
      listing([checkpoint()]),
      new Error('server down\ntrace'),
      listing([checkpoint(), checkpoint({ id: 'c2', step: 80 })])
    ];
    let calls = 0;
    const model = new CheckpointsModel({
      jobId: 'j-aaaaa',
      fetchCheckpoints: async id => {
        expect(id).toBe('j-aaaaa');
        const answer = answers[calls++];
        if (answer instanceof Error) {
          throw answer;
        }
        return answer;
      }
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    await model.refresh();
    expect(model.state.list?.checkpoints).toHaveLength(1);
    await expect(model.refresh()).rejects.toThrow('server down');
    expect(model.state.error).toBe('server down');
    expect(model.state.list?.checkpoints).toHaveLength(1); // the last listing stays
    await model.refresh();
    expect(model.state.error).toBeNull();
    expect(model.state.list?.checkpoints.map(c => c.step)).toEqual([40, 80]);
    expect(changes).toBe(3);
    expect(model.state.done).toBe(false);
    model.dispose();
  });

  it('reads once more after the job has ended, then is done', async () => {
    let ended = false;
    let calls = 0;
    const model = new CheckpointsModel({
      jobId: 'j-aaaaa',
      fetchCheckpoints: async () => {
        calls++;
        return listing([]);
      },
      ended: () => ended
    });
    await model.refresh();
    expect(model.state.done).toBe(false);
    ended = true;
    await model.refresh();
    expect(model.state.done).toBe(true);
    await model.start(); // no more reads once done
    expect(calls).toBe(2);
    model.dispose();
  });

  it('after the end, reads on while a checkpoint is being written, up to a limit', async () => {
    const answers = [
      listing([checkpoint({ complete: false })]),
      listing([checkpoint({ complete: true })])
    ];
    let calls = 0;
    const model = new CheckpointsModel({
      jobId: 'j-aaaaa',
      fetchCheckpoints: async () => answers[Math.min(calls++, answers.length - 1)],
      ended: () => true
    });
    await model.refresh();
    expect(model.state.done).toBe(false); // the one saved just before the end is not complete yet
    await model.refresh();
    expect(model.state.done).toBe(true);
    expect(model.state.list?.checkpoints[0].complete).toBe(true);
    model.dispose();

    let reads = 0;
    const stuck = new CheckpointsModel({
      jobId: 'j-aaaaa',
      fetchCheckpoints: async () => {
        reads++;
        return listing([checkpoint({ complete: false })]); // a partial file left for good
      },
      ended: () => true
    });
    while (!stuck.state.done && reads < 2 * READS_AFTER_END) {
      await stuck.refresh();
    }
    expect(reads).toBe(READS_AFTER_END);
    stuck.dispose();
  });
});
