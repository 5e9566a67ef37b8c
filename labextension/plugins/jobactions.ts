/**
 * The job-actions plugin: cancel and delete a job, each after asking (`disttrain:cancel`,
 * `disttrain:delete`), and submit a job's own spec and script again (`disttrain:resubmit`).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';

import { cancelJob, deleteJob, resubmitJob, TERMINAL_PHASES } from '../rest/client';
import { CommandIDs, jobIdArg } from '../ids';
import { IJobsModel, JobsModel } from '../models/jobsmodel';

export const jobActionsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:job-actions',
  description: 'Cancel, delete and resubmit jobs.',
  autoStart: true,
  requires: [IJobsModel],
  activate: (app: JupyterFrontEnd, model: JobsModel) => {
    /** Ask, then act; an error is shown, and the list is refreshed either way. */
    const confirmThen = async (
      dialog: { title: string; body: string; accept: string; reject?: string },
      action: () => Promise<void>,
      failure: string
    ) => {
      const answer = await showDialog({
        title: dialog.title,
        body: dialog.body,
        buttons: [
          Dialog.cancelButton(dialog.reject ? { label: dialog.reject } : {}),
          Dialog.warnButton({ label: dialog.accept })
        ]
      });
      if (!answer.button.accept) {
        return;
      }
      try {
        await action();
      } catch (err) {
        await showErrorMessage(failure, err as Error);
      }
      await model.poll.refresh();
    };

    app.commands.addCommand(CommandIDs.cancel, {
      label: args => (args.id ? `Cancel Job ${args.id}` : 'Cancel Job'),
      execute: args => {
        const id = jobIdArg(args);
        const name = model.find(id)?.name ?? id;
        return confirmThen(
          {
            title: 'Cancel job?',
            body: `Stop every replica of ${name} (${id})? Its logs and files are kept.`,
            accept: 'Cancel job',
            reject: 'Keep running'
          },
          async () => void (await cancelJob(id)),
          'Cannot cancel the job'
        );
      }
    });

    app.commands.addCommand(CommandIDs.resubmit, {
      label: args => (args.id ? `Resubmit Job ${args.id}` : 'Resubmit Job'),
      execute: async args => {
        const id = jobIdArg(args);
        let answer;
        try {
          answer = await resubmitJob(id);
        } catch (err) {
          await showErrorMessage('Cannot resubmit the job', err as Error);
          return;
        }
        Notification.success(`Started ${answer.job.name} (${answer.id}) again from the start.`, {
          autoClose: 5000
        });
        await model.poll.refresh();
        await app.commands.execute(CommandIDs.details, { id: answer.id });
      }
    });

    app.commands.addCommand(CommandIDs.remove, {
      label: args => (args.id ? `Delete Job ${args.id}` : 'Delete Job'),
      execute: args => {
        const id = jobIdArg(args);
        const job = model.find(id);
        const running = !!job && !TERMINAL_PHASES.has(job.phase);
        return confirmThen(
          {
            title: 'Delete job?',
            body:
              `Remove ${job?.name ?? id} (${id}) from the list?` +
              (running ? ' It is still running and will be cancelled first.' : '') +
              ' Its files (script, logs, TensorBoard data) are kept on disk.',
            accept: 'Delete'
          },
          async () => {
            if (running) {
              await cancelJob(id);
            }
            await deleteJob(id);
          },
          'Cannot delete the job'
        );
      }
    });
  }
};
