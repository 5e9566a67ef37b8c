/** The logs command (`disttrain:open-logs`): the job's panel (the details plugin's) on its Logs tab. */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { textEditorIcon } from '@jupyterlab/ui-components';

import { CommandIDs, jobIdArg } from '../ids';

export const logsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:logs',
  description: 'Opens a job’s logs: the Logs tab of its one panel, followed live.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    app.commands.addCommand(CommandIDs.logs, {
      label: args => (args.id ? `Job Logs: ${args.id}` : 'Job Logs'),
      icon: textEditorIcon,
      execute: args => {
        const id = jobIdArg(args);
        const replica = typeof args.replica === 'string' ? args.replica : '';
        return app.commands.execute(CommandIDs.details, { id, tab: 'logs', replica });
      }
    });
  }
};
