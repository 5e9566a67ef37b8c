/** The logs plugin: one log viewer tab per job (`disttrain:open-logs`). */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { textEditorIcon } from '@jupyterlab/ui-components';

import { getJob, getLogs, streamLogs } from '../api';
import { CommandIDs, jobIdArg } from '../ids';
import { LogFeed } from '../logfeed';
import { LogViewer } from '../logviewer';
import { IJobsModel, JobsModel } from '../model';
import { DistTrainSettings, IDistTrainSettings } from '../settings';
import { openTab } from '../tabs';

export const logsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:logs',
  description: 'Log viewer tabs that follow a job live.',
  autoStart: true,
  requires: [IJobsModel, IDistTrainSettings],
  optional: [ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    model: JobsModel,
    settings: DistTrainSettings,
    restorer: ILayoutRestorer | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<LogViewer>>({ namespace: 'disttrain-logs' });
    app.commands.addCommand(CommandIDs.logs, {
      label: args => (args.id ? `Job Logs: ${args.id}` : 'Job Logs'),
      icon: textEditorIcon,
      execute: args => {
        const id = jobIdArg(args);
        const replica = typeof args.replica === 'string' ? args.replica : '';
        return openTab(app.shell, tracker, `jp-disttrain-logs-${id}`, () => {
          const feed = new LogFeed({
            jobId: id,
            replica,
            tail: settings.values.logTail,
            fetchLogs: getLogs,
            streamLogs,
            fetchJob: getJob,
            visible: () => content.isVisible
          });
          const content: LogViewer = new LogViewer(feed);
          const widget = new MainAreaWidget({ content });
          widget.title.label = `Logs: ${model.find(id)?.name ?? id}`;
          content.title.changed.connect(() => {
            widget.title.label = content.title.label || widget.title.label;
          });
          widget.title.icon = textEditorIcon;
          widget.addClass('jp-DistTrainLogPanel');
          return widget;
        });
      }
    });
    void restorer?.restore(tracker, {
      command: CommandIDs.logs,
      args: w => ({ id: w.content.jobId, replica: w.content.replica }),
      name: w => w.content.jobId
    });
  }
};
