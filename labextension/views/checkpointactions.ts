/**
 * What the Checkpoints section's buttons do in JupyterLab: download through the authenticated
 * URL (as artifacts do), insert the server's load cell below the active cell of the current
 * notebook, and resume the job from the checkpoint, then open the new job's details. Failures
 * are notifications with the server's one-line message.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';

import { checkpointUrl, getCheckpointCode, resumeJob } from '../rest/client';
import { checkpointName, errorLine } from '../models/checkpointsmodel';
import { ICheckpointHandlers } from './checkpointsview';
import { CommandIDs } from '../ids';
import type { ICheckpoint } from '../rest/types';

/** Click a link to the checkpoint's download (the browser saves it; a directory as a tar). */
function download(jobId: string, c: ICheckpoint): void {
  const a = document.createElement('a');
  a.href = checkpointUrl(jobId, c.id);
  a.download = c.path.split('/').pop() ?? c.id;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
}

export function checkpointHandlers(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker | null
): ICheckpointHandlers {
  return {
    download,

    async load(jobId, c) {
      const panel = notebooks?.currentWidget;
      if (!panel) {
        Notification.warning(
          `No notebook is open: open one, then Load in notebook inserts a cell that loads ${checkpointName(c)}.`,
          { autoClose: 8000 }
        );
        return;
      }
      try {
        const answer = await getCheckpointCode(jobId, c.id);
        NotebookActions.insertBelow(panel.content);
        panel.content.activeCell?.model.sharedModel.setSource(answer.code);
        app.shell.activateById(panel.id);
        if (answer.note) {
          Notification.info(answer.note, { autoClose: 8000 });
        }
      } catch (err) {
        Notification.error(`Cannot load ${checkpointName(c)}: ${errorLine(err)}`, {
          autoClose: false
        });
      }
    },

    async resume(jobId, c) {
      let answer;
      try {
        answer = await resumeJob(jobId, c.id);
      } catch (err) {
        Notification.error(`Cannot resume from ${checkpointName(c)}: ${errorLine(err)}`, {
          autoClose: false
        });
        return;
      }
      Notification.success(
        `Started ${answer.job.name} (${answer.id}) from ${checkpointName(c)} of ${jobId}.`,
        { autoClose: 5000 }
      );
      void app.commands.execute(CommandIDs.refresh);
      await app.commands.execute(CommandIDs.details, { id: answer.id });
    },

    openJob(id) {
      void app.commands.execute(CommandIDs.details, { id });
    }
  };
}
