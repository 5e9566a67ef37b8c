/**
 * The body of the stack-dump dialog: "Dumping…", then how the stacks were taken (py-spy or
 * faulthandler) with the server's note, the stacks in monospace (named by the notebook's cells)
 * and a Copy button, the dump as taken folded below; or the
 * server's one-line reason when it could not (unknown replica, job ended, not permitted).
 */
import { Clipboard } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import type { IStackDump } from '../rest/types';

export class StackView extends Widget {
  constructor(replica: string) {
    super();
    this.addClass('jp-DistTrainStack');
    this._status = document.createElement('div');
    this._status.className = 'jp-DistTrainStack-status';
    this._status.setAttribute('role', 'status');
    this._status.textContent = `Dumping the stacks of ${replica}…`;
    this.node.append(this._status);
  }

  /** Show the dump. */
  showDump(dump: IStackDump): void {
    const how =
      dump.method === 'py-spy' ? 'py-spy dump' : `${dump.method} (py-spy was not available)`;
    this._status.textContent = `${dump.replica}, taken with ${how}`;
    const parts: HTMLElement[] = [];
    if (dump.note) {
      const note = document.createElement('div');
      note.className = 'jp-DistTrainStack-note';
      note.textContent = dump.note;
      parts.push(note);
    }
    const copy = document.createElement('button');
    copy.type = 'button';
    copy.className = 'jp-Button jp-mod-styled jp-mod-reject jp-DistTrainStack-copy';
    copy.textContent = 'Copy';
    copy.addEventListener('click', () => {
      Clipboard.copyToSystem(dump.text);
      copy.textContent = 'Copied';
    });
    const pre = document.createElement('pre');
    pre.className = 'jp-DistTrainStack-text';
    pre.textContent = dump.text || '(no stacks)';
    parts.push(copy, pre);
    if (dump.raw && dump.raw !== dump.text) {
      // The server names the script's lines by their cells and folds the product's frames;
      // the dump as taken stays one click away.
      const raw = document.createElement('details');
      raw.className = 'jp-DistTrainStack-raw';
      const label = document.createElement('summary');
      label.textContent = 'As taken (train.py lines, every frame)';
      const rawText = document.createElement('pre');
      rawText.className = 'jp-DistTrainStack-rawText';
      rawText.textContent = dump.raw;
      raw.append(label, rawText);
      parts.push(raw);
    }
    this.node.append(...parts);
  }

  /** Show why there is no dump (the server's one-line message). */
  fail(message: string): void {
    this._status.textContent = message;
    this._status.classList.add('jp-mod-error');
  }

  private _status: HTMLDivElement;
}
