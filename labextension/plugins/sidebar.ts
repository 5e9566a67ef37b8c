/**
 * The sidebar plugin: the jobs panel in the left area (with its "Warm pools" section) and the
 * commands that show or refresh it.
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { CommandIDs } from '../ids';
import { disttrainIcon } from '../icons';
import { IJobsModel, JobsModel } from '../models/jobsmodel';
import { PoolsModel } from '../models/poolsmodel';
import { listPools, releasePool } from '../rest/client';
import { JobsPanel } from '../views/panel';
import { PoolsSection } from '../views/poolsview';
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
    const pools: PoolsModel = new PoolsModel({
      fetchPools: listPools,
      releasePool,
      interval: settings.values.refreshInterval,
      visible: (): boolean => panel.isVisible
    });
    const poolsSection = new PoolsSection(pools, {
      confirm: confirmRelease,
      released: (notice, done) =>
        done
          ? Notification.success(notice, { autoClose: 8000 })
          : Notification.info(notice, { autoClose: 8000 })
    });
    const panel: JobsPanel = new JobsPanel(
      model,
      commands,
      () => settings.values.foldEndedAfterHours,
      [poolsSection]
    );
    void pools.start();
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
      execute: () => Promise.all([model.poll.refresh(), pools.poll.refresh()])
    });
  }
};

/** The confirm dialog before a pool's release. */
async function confirmRelease(question: string, force: boolean): Promise<boolean> {
  const answer = await showDialog({
    title: 'Release warm pool?',
    body: question,
    buttons: [
      Dialog.cancelButton({ label: 'Keep it' }),
      Dialog.warnButton({ label: force ? 'Release (the job fails)' : 'Release' })
    ]
  });
  return answer.button.accept;
}
