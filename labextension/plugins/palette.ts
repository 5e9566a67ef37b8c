/** The palette plugin: the extension's commands that need no job, under one category. */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';

import { ALL_JOBS } from '../api';
import { CommandIDs } from '../ids';

const CATEGORY = 'Distributed Training';

export const palettePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:palette',
  description: 'Command palette entries of the jobs panel, the Runs view and TensorBoard.',
  autoStart: true,
  optional: [ICommandPalette],
  activate: (_app: JupyterFrontEnd, palette: ICommandPalette | null) => {
    if (!palette) {
      return; // a front end without a palette (the commands still work)
    }
    palette.addItem({ command: CommandIDs.open, category: CATEGORY });
    palette.addItem({ command: CommandIDs.refresh, category: CATEGORY });
    palette.addItem({ command: CommandIDs.runs, category: CATEGORY });
    palette.addItem({
      command: CommandIDs.tensorboard,
      category: CATEGORY,
      args: { id: ALL_JOBS }
    });
  }
};
