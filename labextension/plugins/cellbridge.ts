/**
 * The cell-widget bridge: clicks on the buttons under a %%distrun cell run the lab's commands
 * (the contract is in ../cellcontract.ts). The kernel is busy while the cell follows the job,
 * so these clicks are handled here, not there.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';

import { cellAction, CELL_SELECTOR } from '../cellcontract';
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
  }
};
