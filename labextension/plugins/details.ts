/**
 * The details plugin: one panel per job (`disttrain:open-details`), in tabs (overview, logs,
 * resources, runs, events, spec and script). Opening a job's details again, or its logs
 * (`disttrain:open-logs`, the logs plugin), brings that panel to front on the asked tab.
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { INotebookTracker } from '@jupyterlab/notebook';
import { listIcon } from '@jupyterlab/ui-components';

import {
  getJob,
  getLogs,
  getResources,
  getRun,
  getScript,
  listCheckpoints,
  listRuns,
  streamLogs
} from '../rest/client';
import { checkpointHandlers } from '../views/checkpointactions';
import { CheckpointsModel } from '../models/checkpointsmodel';
import { CheckpointsSection, ICheckpointHandlers } from '../views/checkpointsview';
import { CommandIDs, jobIdArg } from '../ids';
import { isDetailsTab, JobDetails } from '../views/details';
import { DiagnosisModel } from '../models/diagnosismodel';
import { JobDetailsModel } from '../models/detailsmodel';
import { JobRunsModel } from '../models/jobrunsmodel';
import { LogFeed } from '../models/logfeed';
import { LogViewer } from '../views/logviewer';
import { ResourcesModel } from '../models/resourcesmodel';
import { RunsSection } from '../views/runsection';
import { DistTrainSettings, IDistTrainSettings } from '../settings';
import { openTab } from '../views/tabs';

/** The job's panel: its models, and the log viewer made when the Logs tab is first shown. */
function createDetails(
  app: JupyterFrontEnd,
  settings: DistTrainSettings,
  editors: IEditorServices | null,
  handlers: ICheckpointHandlers,
  id: string
): MainAreaWidget<JobDetails> {
  const shown = () => content.isVisible;
  const model: JobDetailsModel = new JobDetailsModel({
    jobId: id,
    fetchJob: getJob,
    fetchScript: getScript,
    interval: settings.values.refreshInterval,
    visible: shown
  });
  // how the views that stop reading once the job has ended poll
  const untilEnded = {
    jobId: id,
    interval: settings.values.refreshInterval,
    visible: shown,
    ended: () => model.ended
  };
  const resources = new ResourcesModel({ ...untilEnded, fetchResources: getResources });
  const runs = new JobRunsModel({
    jobId: id,
    fetchRuns: listRuns,
    fetchRun: getRun,
    interval: settings.values.refreshInterval,
    visible: shown
  });
  const section = new RunsSection(runs, runFilter =>
    app.commands.execute(CommandIDs.tensorboard, { id, runFilter })
  );
  const logs = (replica: string): LogViewer => {
    const feed = new LogFeed({
      jobId: id,
      replica,
      tail: settings.values.logTail,
      fetchLogs: getLogs,
      streamLogs,
      fetchJob: getJob,
      visible: () => viewer.isVisible
    });
    const viewer: LogViewer = new LogViewer(feed);
    return viewer;
  };
  const checkpoints = new CheckpointsModel({ ...untilEnded, fetchCheckpoints: listCheckpoints });
  const content: JobDetails = new JobDetails(model, editors, {
    resources,
    onStack: replica => void app.commands.execute(CommandIDs.stack, { id, replica }),
    runs: section,
    checkpoints: new CheckpointsSection(checkpoints, handlers),
    logs,
    diagnosis: new DiagnosisModel({ jobId: id })
  });
  const widget = new MainAreaWidget({ content });
  widget.title.icon = listIcon;
  widget.addClass('jp-DistTrainDetailsPanel');
  return widget;
}

export const detailsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:details',
  description:
    'One panel per job, in tabs: overview, logs, resources, runs, checkpoints, events, spec, script.',
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
      caption: 'Open the job’s panel (tab: overview, logs, resources, runs, events or spec)',
      icon: listIcon,
      execute: args => {
        const id = jobIdArg(args);
        const widget = openTab(app.shell, tracker, `jp-disttrain-details-${id}`, () =>
          createDetails(app, settings, editors, handlers, id)
        );
        const replica = typeof args.replica === 'string' ? args.replica : undefined;
        widget.content.showTab(isDetailsTab(args.tab) ? args.tab : 'overview', replica);
        return widget;
      }
    });
    void restorer?.restore(tracker, {
      command: CommandIDs.details,
      args: w => ({
        id: w.content.jobId,
        tab: w.content.tab,
        replica: w.content.logs?.replica ?? ''
      }),
      name: w => w.content.jobId
    });
  }
};
