/** The TensorBoard plugin: one TensorBoard tab per job, or for all jobs (`disttrain:open-tensorboard`). */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IThemeManager, WidgetTracker } from '@jupyterlab/apputils';

import { ALL_JOBS } from '../rest/client';
import { CommandIDs } from '../ids';
import { chartIcon } from '../icons';
import { DistTrainSettings, IDistTrainSettings } from '../settings';
import { openTab } from '../views/tabs';
import { TensorBoardPanel, tensorboardTabId } from '../views/tensorboard';

export const tensorboardPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:tensorboard',
  description: 'TensorBoard tabs of a job or of all jobs, reloading their data as it grows.',
  autoStart: true,
  requires: [IDistTrainSettings],
  optional: [ILayoutRestorer, IThemeManager],
  activate: (
    app: JupyterFrontEnd,
    settings: DistTrainSettings,
    restorer: ILayoutRestorer | null,
    themes: IThemeManager | null
  ) => {
    const tracker = new WidgetTracker<TensorBoardPanel>({ namespace: 'disttrain-tensorboard' });
    // TensorBoard follows JupyterLab's theme (the body says which once a theme has loaded)
    const dark = () =>
      themes?.theme
        ? !themes.isLight(themes.theme)
        : document.body.dataset.jpThemeLight === 'false';
    themes?.themeChanged.connect(() => tracker.forEach(w => (w.dark = dark())));
    app.commands.addCommand(CommandIDs.tensorboard, {
      label: args =>
        args.id && args.id !== ALL_JOBS
          ? `TensorBoard: ${args.id}`
          : 'Open TensorBoard for All Jobs',
      icon: chartIcon,
      execute: args => {
        const id = typeof args.id === 'string' && args.id ? args.id : ALL_JOBS;
        // the runs to show, as TensorBoard's run filter regex (the Runs view's selection)
        const runFilter = typeof args.runFilter === 'string' ? args.runFilter : undefined;
        const panel = openTab(
          app.shell,
          tracker,
          tensorboardTabId(id),
          () =>
            new TensorBoardPanel({
              jobId: id,
              dark: dark(),
              autoReload: settings.values.tensorboardAutoReload,
              interval: settings.values.tensorboardReloadInterval,
              runFilter
            })
        );
        if (runFilter !== undefined) {
          panel.showRuns(runFilter); // a tab already open shows the new selection
        }
        return panel;
      }
    });
    settings.changed.connect(() =>
      tracker.forEach(w => {
        w.autoReload = settings.values.tensorboardAutoReload;
        w.interval = settings.values.tensorboardReloadInterval;
      })
    );
    void restorer?.restore(tracker, {
      command: CommandIDs.tensorboard,
      args: w => ({ id: w.content.jobId, runFilter: w.runFilter }),
      name: w => w.content.jobId
    });
  }
};
