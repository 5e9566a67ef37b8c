/**
 * The sidebar's "Warm pools" section: each pool kept warm between jobs (where, its nodes,
 * accelerators held, idle for, releases in) with a Release button that asks first. Hidden while
 * there is none. Plain DOM, redrawn from `PoolsModel` on each change.
 */
import {
  IRefusal,
  PoolsModel,
  poolCells,
  poolsStatus,
  releaseQuestion,
  releasedNotice
} from '../models/poolsmodel';
import { errorMessage } from '../models/pollingmodel';
import { element } from '../render/dom';
import type { IPool } from '../rest/types';

/** How the section talks to the user (the lab's dialog and notifications). */
export interface IPoolsSectionUI {
  /** Asks a yes/no question before a release (`force`: a job runs in the pool). */
  confirm: (question: string, force: boolean) => Promise<boolean>;
  /**
   * Says what a release did (`done`: the pool has ended, else it is still ending); the section
   * may be gone by then (it was the last pool).
   */
  released: (notice: string, done: boolean) => void;
}

export class PoolsSection {
  constructor(
    readonly model: PoolsModel,
    private _ui: IPoolsSectionUI
  ) {
    this.node = document.createElement('section');
    this.node.className = 'jp-DistTrainPools';
    this.node.setAttribute('aria-label', 'Warm pools');
    const h = document.createElement('h3');
    h.className = 'jp-DistTrainPools-title';
    h.textContent = 'Warm pools';
    this._status = document.createElement('div');
    this._status.className = 'jp-DistTrainPools-status';
    this._status.setAttribute('role', 'status');
    this._list = document.createElement('ul');
    this._list.className = 'jp-DistTrainPools-list';
    this.node.append(h, this._status, this._list);
    model.changed.connect(this.render, this);
    this.render();
  }

  readonly node: HTMLElement;

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
  }

  render(): void {
    const status = poolsStatus(this.model, this._refused);
    this.node.hidden = status.hidden;
    this._status.textContent = status.text;
    this._status.classList.toggle('jp-mod-error', status.error);
    this._list.replaceChildren(...this.model.pools.map(pool => this._row(pool)));
  }

  private _row(pool: IPool): HTMLLIElement {
    const cells = poolCells(pool);
    const li = element('li', 'jp-DistTrainPools-pool');
    li.dataset.poolId = pool.id;
    const title = element('div', 'jp-DistTrainPools-place');
    // wraps as a whole ("no GPU held")
    const held = element('span', 'jp-DistTrainPools-held', cells.accelerators);
    title.append(`${cells.place}: `, held);
    const detail = element(
      'div',
      'jp-DistTrainPools-detail',
      `${cells.nodes} · ${cells.idle} · ${cells.releases}`
    );
    const release = element(
      'button',
      'jp-DistTrainPools-release jp-Button jp-mod-minimal',
      'Release'
    );
    release.type = 'button';
    release.title = `Release ${pool.id} now`;
    release.setAttribute('aria-label', `Release warm pool ${pool.id}`);
    release.addEventListener('click', () => void this.release(pool));
    li.append(title, detail, release);
    return li;
  }

  /** Ask, then release (by force when a job runs in it: the user was told it fails). */
  async release(pool: IPool): Promise<void> {
    const force = pool.jobs.length > 0;
    if (!(await this._ui.confirm(releaseQuestion(pool), force))) {
      return;
    }
    try {
      const answer = await this.model.release(pool.id, force);
      this._ui.released(releasedNotice(answer), answer.released);
      this._refused = null;
    } catch (err) {
      this._refused = { id: pool.id, message: `Cannot release ${pool.id}: ${errorMessage(err)}` };
    }
    this.render();
  }

  private _status: HTMLDivElement;
  private _list: HTMLUListElement;
  private _refused: IRefusal | null = null;
}
