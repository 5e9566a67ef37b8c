/** The sidebar plugin: the jobs panel in the left area and the commands that show or refresh it. */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';

import { CommandIDs } from '../ids';
import { disttrainIcon } from '../icons';
import { IJobsModel, JobsModel } from '../models/jobsmodel';
import { JobsPanel } from '../views/panel';
import { DistTrainSettings, IDistTrainSettings } from '../settings';

export const sidebarPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:sidebar',
  description: 'The jobs panel in the left sidebar.',
  autoStart: true,
  requires: [IJobsModel, IDistTrainSettings],
  optional: [ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    model: JobsModel,
    settings: DistTrainSettings,
    restorer: ILayoutRestorer | null
  ) => {
    const { commands, shell } = app;
    const panel = new JobsPanel(model, commands, () => settings.values.foldEndedAfterHours);
    settings.changed.connect(() => panel.update());
    shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, panel.id);
    // with the panel closed and nothing running, the model looks for new jobs slowly
    model.watch(() => panel.isVisible);

    commands.addCommand(CommandIDs.open, {
      label: 'Open Distributed Training Panel',
      caption: 'Show the jobs of %%distrun in the left sidebar',
      icon: disttrainIcon,
      execute: () => {
        shell.activateById(panel.id);
        void model.poll.refresh();
      }
    });
    commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Distributed Training Jobs',
      execute: () => model.poll.refresh()
    });
  }
};
