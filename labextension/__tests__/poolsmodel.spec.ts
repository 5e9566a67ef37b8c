import { PoolsModel, poolCells, releaseQuestion } from '../models/poolsmodel';
import { poolsStatus, releasedNotice } from '../models/poolsmodel';
import type { IPool, IPoolList, IReleaseAnswer } from '../rest/types';

function pool(overrides: Partial<IPool> = {}): IPool {
  return {
    id: 'slurm-12-0123456789abcdef0123',
    backend: 'slurm',
    place: 'allocation 12',
    fingerprint: '0123456789abcdef0123',
    nodes: [{ node: 0, host: 'n1', step: '12.3', accelerators: ['0', '1'], jobs: [] }],
    accelerators: 2,
    jobs: [],
    idle_for: 75,
    releases_in: 1725,
    namespace: null,
    ...overrides
  };
}

describe('a pool as the sidebar shows it', () => {
  it('says where, its nodes, the accelerators held, idle for and releases in', () => {
    const cells = poolCells(pool());
    expect([cells.place, cells.nodes, cells.accelerators]).toEqual([
      'slurm, allocation 12',
      'n1 (step 12.3)',
      '2 GPUs held'
    ]);
    expect(`${cells.idle}; ${cells.releases}`).toBe('idle 1m 15s; releases itself in 28m 45s');
  });

  it('says which job runs in it instead of how long it was idle', () => {
    const busy = pool({
      jobs: ['train-abcde'],
      idle_for: null,
      releases_in: null,
      accelerators: 0
    });
    expect(poolCells(busy)).toMatchObject({
      accelerators: 'no GPU held',
      idle: 'running train-abcde',
      releases: 'kept while a job runs'
    });
    expect(releaseQuestion(busy)).toContain('Job train-abcde runs in it and will fail.');
    expect(releaseQuestion(pool())).not.toContain('will fail');
  });
});

describe("the section's status line", () => {
  const listing = (pools: IPool[], errors: string[] = [], error: string | null = null) => ({
    pools,
    errors,
    error
  });

  it('hides the section once a release has left no pool: the notice says it, not the section', () => {
    expect(poolsStatus(listing([]), null)).toEqual({ text: '', error: false, hidden: true });
    const answer = {
      id: pool().id,
      released: true,
      message: 'released: its warm steps (12.3 on n1) have ended'
    };
    expect(releasedNotice(answer)).toBe(
      `Warm pool ${pool().id} released: its warm steps (12.3 on n1) have ended`
    );
    expect(poolsStatus(listing([pool()]), null)).toEqual({ text: '', error: false, hidden: false });
  });

  it('says a refused release while that pool is listed, and a load or backend failure', () => {
    const refused = { id: pool().id, message: `Cannot release ${pool().id}: runs job j-1` };
    expect(poolsStatus(listing([pool()]), refused)).toEqual({
      text: refused.message,
      error: true,
      hidden: false
    });
    // the pool gone since (released by itself): the refusal is stale, and nothing is left to show
    expect(poolsStatus(listing([]), refused).hidden).toBe(true);
    expect(poolsStatus(listing([], ['kubernetes: no cluster config'], 'HTTP 500'), null)).toEqual({
      text: 'Cannot load warm pools: HTTP 500 · kubernetes: no cluster config',
      error: true,
      hidden: false
    });
  });
});

describe('PoolsModel', () => {
  it('lists the pools, releases one and reads the list again, whatever the answer', async () => {
    let listing: IPoolList = { pools: [pool()], errors: ['kubernetes: no cluster config'] };
    const released: [string, boolean][] = [];
    const model = new PoolsModel({
      fetchPools: async () => listing,
      releasePool: async (id: string, force: boolean): Promise<IReleaseAnswer> => {
        released.push([id, force]);
        if (!force) {
          throw new Error(`pool ${id} runs job j-1: cancel it first`);
        }
        listing = { pools: [], errors: [] };
        return { id, released: true, message: 'released: its warm steps (12.3 on n1) have ended' };
      }
    });
    await model.refresh();
    expect(model.pools.map(p => p.id)).toEqual([pool().id]);
    expect(model.errors).toEqual(['kubernetes: no cluster config']);

    await expect(model.release(pool().id)).rejects.toThrow('runs job j-1: cancel it first');
    expect(model.pools).toHaveLength(1); // refused: still listed
    const answer = await model.release(pool().id, true);
    expect(answer.released).toBe(true);
    expect(released).toEqual([
      [pool().id, false],
      [pool().id, true]
    ]);
    expect(model.pools).toEqual([]);
    expect(model.find(pool().id)).toBeUndefined();
    model.dispose();
  });
});
