/** The details plugin: one job details tab per job (`disttrain:open-details`). */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { INotebookTracker } from '@jupyterlab/notebook';
import { listIcon } from '@jupyterlab/ui-components';

import { getJob, getResources, getRun, getScript, listCheckpoints, listRuns } from '../api';
import { checkpointHandlers } from '../checkpointactions';
import { CheckpointsModel } from '../checkpointsmodel';
import { CheckpointsSection } from '../checkpointsview';
import { CommandIDs, jobIdArg } from '../ids';
import { JobDetails } from '../details';
import { JobDetailsModel } from '../detailsmodel';
import { JobRunsModel } from '../jobrunsmodel';
import { ResourcesModel } from '../resources';
import { RunsSection } from '../runsection';
import { DistTrainSettings, IDistTrainSettings } from '../settings';
import { openTab } from '../tabs';

export const detailsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:details',
  description:
    'Job details tabs: spec, replicas, resources, events, checkpoints, runs and the packaged script.',
  autoStart: true,
  requires: [IDistTrainSettings],
  optional: [IEditorServices, ILayoutRestorer, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    settings: DistTrainSettings,
    editors: IEditorServices | null,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null
  ) => {
    const handlers = checkpointHandlers(app, notebooks);
    const tracker = new WidgetTracker<MainAreaWidget<JobDetails>>({
      namespace: 'disttrain-details'
    });
    app.commands.addCommand(CommandIDs.details, {
      label: args => (args.id ? `Job Details: ${args.id}` : 'Job Details'),
      icon: listIcon,
      execute: args => {
        const id = jobIdArg(args);
        return openTab(app.shell, tracker, `jp-disttrain-details-${id}`, () => {
          const model: JobDetailsModel = new JobDetailsModel({
            jobId: id,
            fetchJob: getJob,
            fetchScript: getScript,
            interval: settings.values.refreshInterval,
            visible: () => content.isVisible
          });
          const resources = new ResourcesModel({
            jobId: id,
            fetchResources: getResources,
            interval: settings.values.refreshInterval,
            visible: () => content.isVisible,
            ended: () => model.ended
          });
          const runs = new JobRunsModel({
            jobId: id,
            fetchRuns: listRuns,
            fetchRun: getRun,
            interval: settings.values.refreshInterval,
            visible: () => content.isVisible
          });
          const section = new RunsSection(runs, runFilter =>
            app.commands.execute(CommandIDs.tensorboard, { id, runFilter })
          );
          const content: JobDetails = new JobDetails(model, editors, {
            resources,
            onStack: replica => void app.commands.execute(CommandIDs.stack, { id, replica }),
            runs: section
          });
          const checkpoints = new CheckpointsModel({
            jobId: id,
            fetchCheckpoints: listCheckpoints,
            interval: settings.values.refreshInterval,
            visible: () => content.isVisible,
            ended: () => model.ended
          });
          content.insertWidget(1, new CheckpointsSection(checkpoints, handlers)); // after the job's sections
          const widget = new MainAreaWidget({ content });
          widget.title.icon = listIcon;
          widget.addClass('jp-DistTrainDetailsPanel');
          return widget;
        });
      }
    });
    void restorer?.restore(tracker, {
      command: CommandIDs.details,
      args: w => ({ id: w.content.jobId }),
      name: w => w.content.jobId
    });
  }
};
