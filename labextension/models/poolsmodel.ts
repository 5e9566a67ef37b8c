/**
 * The warm pools of the sidebar's "Warm pools" section: one poll of `GET pools` (capacity kept
 * warm between jobs: Slurm's warm steps inside an allocation), and a pool's release. Local zygotes
 * are no pool (they hold no accelerator), so the section stays empty without a cluster.
 */
import { formatDuration } from '../render/format';
import type { IPool, IPoolList, IReleaseAnswer } from '../rest/types';
import { IPollingModelOptions, PollingModel } from './pollingmodel';

export interface IPoolsModelOptions extends IPollingModelOptions {
  /** Loads the pools (`listPools` in the extension). */
  fetchPools: () => Promise<IPoolList>;
  /** Releases one (`releasePool`). */
  releasePool: (id: string, force: boolean) => Promise<IReleaseAnswer>;
}

export class PoolsModel extends PollingModel<IPoolList> {
  constructor(options: IPoolsModelOptions) {
    super('jupyter_disttrain:pools', options, 60 * 1000);
    this._fetch = options.fetchPools;
    this._release = options.releasePool;
  }

  get pools(): readonly IPool[] {
    return this._pools;
  }

  /** Backends that could not say which pools they keep (name: why). */
  get errors(): readonly string[] {
    return this._errors;
  }

  find(id: string): IPool | undefined {
    return this._pools.find(p => p.id === id);
  }

  /**
   * Release a pool, then read the list again (whatever the answer: a refused release leaves the
   * pool, an accepted one removes it). Rejects with the server's one-line reason (a pool running
   * a job, unless `force`).
   */
  async release(id: string, force = false): Promise<IReleaseAnswer> {
    try {
      return await this._release(id, force);
    } finally {
      await this.refresh().catch(() => undefined);
    }
  }

  protected fetch(): Promise<IPoolList> {
    return this._fetch();
  }

  protected apply(answer: IPoolList): void {
    this._pools = answer.pools;
    this._errors = answer.errors;
  }

  private _fetch: () => Promise<IPoolList>;
  private _release: (id: string, force: boolean) => Promise<IReleaseAnswer>;
  private _pools: IPool[] = [];
  private _errors: string[] = [];
}

/** What a pool's row says: where, its nodes, accelerators held, idle for, releases in. */
export interface IPoolCells {
  place: string;
  nodes: string;
  accelerators: string;
  idle: string;
  releases: string;
}

/** A pool's row as text; a pool running a job says which instead of how long it was idle. */
export function poolCells(pool: IPool): IPoolCells {
  const n = pool.accelerators;
  const running = pool.jobs.length > 0;
  return {
    place: `${pool.backend}, ${pool.place}`,
    nodes: pool.nodes.map(node => `${node.host} (step ${node.step})`).join(', '),
    accelerators: n === 0 ? 'no GPU held' : `${n} GPU${n === 1 ? '' : 's'} held`,
    idle: running
      ? `running ${pool.jobs.join(', ')}`
      : `idle ${formatDuration((pool.idle_for ?? 0) * 1000)}`,
    releases:
      running || pool.releases_in === null
        ? 'kept while a job runs'
        : `releases itself in ${formatDuration(pool.releases_in * 1000)}`
  };
}

/** A release refused or failed: the pool's id and the one-line reason. */
export interface IRefusal {
  id: string;
  message: string;
}

/** What the section says above its pools, and whether it shows at all. */
export interface IPoolsStatus {
  text: string;
  error: boolean;
  hidden: boolean;
}

/**
 * The section's line: a failed load, the backends that could not say, a release refused while
 * that pool is still listed. Shown only while there is a pool or such a line: a release that
 * worked leaves none (the lab tells it in a notification), so an empty section goes.
 */
export function poolsStatus(
  model: Pick<PoolsModel, 'pools' | 'error' | 'errors'>,
  refused: IRefusal | null
): IPoolsStatus {
  const stillListed = refused && model.pools.some(p => p.id === refused.id);
  const lines = [model.error && `Cannot load warm pools: ${model.error}`, ...model.errors];
  const said = [...lines, stillListed ? refused.message : ''].filter(Boolean);
  return {
    text: said.join(' · '),
    error: said.length > 0,
    hidden: model.pools.length === 0 && said.length === 0
  };
}

/** The notification of a release: "Warm pool ID released: its warm steps (…) have ended". */
export function releasedNotice(answer: IReleaseAnswer): string {
  return `Warm pool ${answer.id} ${answer.message}`;
}

/** The confirm dialog's question before a release (its jobs fail when it runs some). */
export function releaseQuestion(pool: IPool): string {
  const held = poolCells(pool).accelerators;
  const what = `Release warm pool ${pool.id} (${pool.place}, ${held})? A re-run then starts cold.`;
  return pool.jobs.length ? `${what} Job ${pool.jobs.join(', ')} runs in it and will fail.` : what;
}
