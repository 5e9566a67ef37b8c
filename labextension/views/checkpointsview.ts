/**
 * The Checkpoints section of a job's details (issue 26): the disk its checkpoints use and
 * `--keep-checkpoints`, the job it was resumed from (a link to its details), and a table of
 * its checkpoints (step, epoch, kind, time, size, state, the run's metrics at that step,
 * pinned) with Download, Load in notebook and Resume from here on each. One widget that owns
 * its model (started when shown, disposed with it), so it can sit in any container.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { nameRows, section, table } from '../render/dom';
import {
  CHECKPOINT_COLUMNS,
  checkpointActionStates,
  checkpointCells,
  CheckpointsModel,
  IActionState,
  resumedFromText,
  usageText
} from '../models/checkpointsmodel';
import type { ICheckpoint, IResumedFrom } from '../rest/types';

/** What the buttons do; each returns when done (the button is disabled meanwhile). */
export interface ICheckpointHandlers {
  download(jobId: string, checkpoint: ICheckpoint): Promise<void> | void;
  load(jobId: string, checkpoint: ICheckpoint): Promise<void>;
  resume(jobId: string, checkpoint: ICheckpoint): Promise<void>;
  /** Open another job's details (the job this one resumed from). */
  openJob(jobId: string): void;
}

type Action = 'download' | 'load' | 'resume';
const LABELS: Record<Action, string> = {
  download: 'Download',
  load: 'Load in notebook',
  resume: 'Resume from here'
};

export class CheckpointsSection extends Widget {
  constructor(
    readonly model: CheckpointsModel,
    private _handlers: ICheckpointHandlers
  ) {
    super();
    this.addClass('jp-DistTrainCheckpoints');
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.model.start();
  }

  private _render(): void {
    const { list, error } = this.model.state;
    // a job that has none (and started from none) shows no section
    const empty = !list || (list.checkpoints.length === 0 && !list.resumed_from);
    this.node.hidden = empty && !error;
    const parts: HTMLElement[] = [section('Checkpoints')];
    if (error) {
      parts.push(line('jp-DistTrainDetails-reason jp-mod-warn', `Cannot list them: ${error}`));
    }
    if (list) {
      if (list.resumed_from) {
        parts.push(this._resumedFrom(list.resumed_from));
      }
      const usage = line('jp-DistTrainCheckpoints-usage', usageText(list.usage));
      usage.title = `Written to ${list.dir}`;
      parts.push(usage);
      if (list.checkpoints.length) {
        parts.push(this._table(list.checkpoints));
      }
    }
    const focused = document.activeElement as HTMLElement | null;
    const key = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    this.node.replaceChildren(...parts);
    if (key) {
      this.node.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
    }
  }

  private _resumedFrom(from: IResumedFrom): HTMLElement {
    const box = line('jp-DistTrainCheckpoints-resumedFrom', '');
    const link = document.createElement('button');
    link.type = 'button';
    link.className = 'jp-DistTrainCheckpoints-job';
    link.textContent = resumedFromText(from);
    link.title = `Details of job ${from.job} (${from.kind} checkpoint ${from.path})`;
    link.dataset.focusKey = 'resumed-from';
    link.addEventListener('click', () => this._handlers.openJob(from.job));
    box.append(link);
    return box;
  }

  private _table(checkpoints: readonly ICheckpoint[]): HTMLElement {
    const rows = checkpoints.map(c => {
      const cells = checkpointCells(c);
      const states = checkpointActionStates(c);
      const actions = document.createElement('span');
      actions.className = 'jp-DistTrainCheckpoints-actions';
      for (const action of ['download', 'load', 'resume'] as const) {
        actions.append(this._button(c, action, states[action]));
      }
      return [...CHECKPOINT_COLUMNS.map(col => cells[col]), actions];
    });
    const t = table([...CHECKPOINT_COLUMNS, 'Actions'], rows, 'jp-DistTrainCheckpoints-table');
    nameRows(
      t,
      'checkpoint',
      checkpoints.map(c => c.id)
    );
    t.querySelectorAll('tbody tr').forEach((tr, i) => {
      tr.classList.toggle('jp-mod-incomplete', !checkpoints[i].complete);
      tr.querySelector('td[data-column="Metrics"]')?.classList.add(
        'jp-DistTrainCheckpoints-metrics'
      );
    });
    return t;
  }

  private _button(c: ICheckpoint, action: Action, state: IActionState): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = `jp-Button jp-mod-minimal jp-mod-small jp-DistTrainCheckpoints-${action}`;
    b.textContent = LABELS[action];
    b.title = state.title;
    b.dataset.action = action;
    b.dataset.focusKey = `${action}/${c.id}`;
    const busy = this._busy.has(b.dataset.focusKey);
    b.disabled = !state.enabled || busy;
    b.addEventListener('click', () => void this._run(c, action));
    return b;
  }

  /** Run an action with its button disabled until it is done (a redraw keeps it so). */
  private async _run(c: ICheckpoint, action: Action): Promise<void> {
    const key = `${action}/${c.id}`;
    if (this._busy.has(key)) {
      return;
    }
    this._busy.add(key);
    this._render();
    try {
      await this._handlers[action](this.model.jobId, c);
      if (action === 'resume') {
        // the checkpoint is now pinned (a job resumes from it): list again, even after the end
        await this.model.refresh().catch(() => undefined);
      }
    } finally {
      this._busy.delete(key);
      if (!this.isDisposed) {
        this._render();
      }
    }
  }

  private _busy = new Set<string>();
}

function line(className: string, text: string): HTMLElement {
  const el = document.createElement('div');
  el.className = className;
  el.textContent = text;
  return el;
}
