/**
 * The cell-widget bridge: clicks on the buttons under a %%distrun cell run the lab's commands,
 * and Enter in a rank's debugger input sends its command (the contract is in ../cellcontract.ts).
 * The kernel is busy while the cell follows the job, so these are handled here, not there: the
 * command goes through the REST API, and the kernel shows pdb's answer in the cell's transcript.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';

import { debugRank } from '../rest/client';
import { cellAction, CELL_SELECTOR, debugTarget } from '../cellcontract';
import { CommandIDs, SIDEBAR_ID } from '../ids';

export const cellBridgePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:cell-bridge',
  description: 'Runs the commands the buttons under a %%distrun cell ask for.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    document.addEventListener(
      'click',
      event => {
        const found = (event.target as Element | null)?.closest?.(CELL_SELECTOR);
        const action = found ? cellAction(found) : null;
        if (!action) {
          return;
        }
        event.preventDefault();
        event.stopPropagation();
        if (action.command === CommandIDs.logs) {
          app.shell.activateById(SIDEBAR_ID);
        }
        void app.commands.execute(action.command, { id: action.id });
      },
      true
    );
    document.addEventListener('keydown', event => void sendDebugLine(event), true);
  }
};

/** Enter in a debugger input: its line to the rank's prompt; an error is said in its tooltip. */
async function sendDebugLine(event: KeyboardEvent): Promise<void> {
  const input = event.target as HTMLInputElement | null;
  const target = event.key === 'Enter' && input ? debugTarget(input) : null;
  if (!input || !target || input.disabled) {
    return;
  }
  event.preventDefault();
  event.stopPropagation(); // not the notebook's shortcut (Enter: edit mode, Shift-Enter: run)
  const line = input.value;
  input.value = '';
  input.disabled = true;
  try {
    const answer = await debugRank(target.id, target.replica, line);
    input.disabled = !answer.open;
    input.classList.remove('jp-mod-error');
  } catch (err) {
    input.disabled = false;
    input.classList.add('jp-mod-error');
    input.title = String((err as Error).message ?? err);
  }
  if (!input.disabled) {
    input.focus();
  }
}
