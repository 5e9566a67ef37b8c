/**
 * The stack plugin: dump a running replica's Python stacks into a dialog (`disttrain:stack`),
 * or every running replica's side by side (`disttrain:stacks`): which rank is stuck, and where;
 * and diagnose the job (`disttrain:diagnose`: which rank, in which collective, at which cell
 * line), its verdict said in a notification (the details and the cell's view show it too).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { Panel } from '@lumino/widgets';

import { diagnoseJob, dumpStack, getJob } from '../rest/client';
import { CommandIDs, jobIdArg } from '../ids';
import { StackView } from '../views/stackview';

export const stackPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:stack',
  description: "Dump a replica's Python stacks (which rank is stuck, and where).",
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    app.commands.addCommand(CommandIDs.stack, {
      label: args => (args.replica ? `Dump Stacks of ${args.replica}` : 'Dump Stacks'),
      execute: args => {
        const id = jobIdArg(args);
        const replica = typeof args.replica === 'string' ? args.replica : '';
        if (!replica) {
          throw new Error('this command needs a replica: use the Stack button in the job details');
        }
        const body = new StackView(replica);
        // the dialog opens at once; the dump (py-spy takes a moment) fills it in
        dumpStack(id, replica).then(
          dump => body.showDump(dump),
          err => body.fail(err instanceof Error ? err.message : String(err))
        );
        return showDialog({
          title: `Stacks of ${replica} (${id})`,
          body,
          buttons: [Dialog.okButton({ label: 'Close' })]
        });
      }
    });

    app.commands.addCommand(CommandIDs.diagnose, {
      label: args => (args.id ? `Diagnose ${args.id}` : 'Diagnose the Job'),
      caption: 'Which rank is stuck, in which collective, at which cell line',
      execute: async args => {
        const id = jobIdArg(args);
        const details = {
          label: 'Details',
          callback: () => void app.commands.execute(CommandIDs.details, { id })
        };
        try {
          const incident = await diagnoseJob(id);
          Notification.warning(incident.verdict, { autoClose: false, actions: [details] });
          return incident;
        } catch (err) {
          Notification.error(
            `Could not diagnose ${id}: ${err instanceof Error ? err.message : err}`
          );
        }
      }
    });

    app.commands.addCommand(CommandIDs.stacks, {
      label: args =>
        args.id ? `Dump Stacks of Every Rank of ${args.id}` : 'Dump Stacks of Every Rank',
      execute: async args => {
        const id = jobIdArg(args);
        const replicas = (await getJob(id)).status.replicas.filter(r => r.phase === 'Running');
        if (!replicas.length) {
          throw new Error(`job ${id} has no running replica: stacks exist only while it runs`);
        }
        const body = new Panel();
        body.addClass('jp-DistTrainStacks');
        for (const { name } of replicas) {
          const view = new StackView(name);
          // the dumps are taken at once, each filling its column when done
          dumpStack(id, name).then(
            dump => view.showDump(dump),
            err => view.fail(err instanceof Error ? err.message : String(err))
          );
          body.addWidget(view);
        }
        return showDialog({
          title: `Stacks of every rank (${id})`,
          body,
          buttons: [Dialog.okButton({ label: 'Close' })]
        });
      }
    });
  }
};
