/** The Runs plugin: the table of every run of every job (`disttrain:open-runs`), one tab. */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { tableRowsIcon } from '@jupyterlab/ui-components';

import { getRun, listRuns } from '../rest/client';
import { ComparePoints } from '../models/comparepoints';
import { CommandIDs } from '../ids';
import { RunsTableModel } from '../models/runsmodel';
import { RUNS_VIEW_ID, RunsView } from '../views/runsview';
import { DistTrainSettings, IDistTrainSettings } from '../settings';
import { openTab } from '../views/tabs';

export const runsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:runs',
  description: 'The Runs view: every run of every job, compared in a table and in TensorBoard.',
  autoStart: true,
  requires: [IDistTrainSettings],
  optional: [ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    settings: DistTrainSettings,
    restorer: ILayoutRestorer | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<RunsView>>({ namespace: 'disttrain-runs' });
    app.commands.addCommand(CommandIDs.runs, {
      label: 'Open Runs',
      caption: 'Compare the runs (hparams, metrics) of every job, and open them in TensorBoard',
      icon: tableRowsIcon,
      execute: () =>
        openTab(app.shell, tracker, RUNS_VIEW_ID, () => {
          const model: RunsTableModel = new RunsTableModel({
            fetchRuns: () => listRuns(),
            interval: settings.values.refreshInterval,
            visible: () => content.isVisible
          });
          const content: RunsView = new RunsView(model, app.commands, new ComparePoints(getRun));
          const widget = new MainAreaWidget({ content });
          widget.title.icon = tableRowsIcon;
          widget.addClass('jp-DistTrainRunsPanel');
          return widget;
        })
    });
    void restorer?.restore(tracker, { command: CommandIDs.runs, name: () => 'runs' });
  }
};
