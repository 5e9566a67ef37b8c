/** The stack plugin: dump a running replica's Python stacks into a dialog (`disttrain:stack`). */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';

import { dumpStack } from '../api';
import { CommandIDs, jobIdArg } from '../ids';
import { StackView } from '../stackview';

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
  }
};
