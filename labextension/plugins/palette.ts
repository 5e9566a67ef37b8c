/**
 * The palette plugin: the extension's commands under one category, and commands that act on
 * the job selected in the jobs panel (details, logs, TensorBoard, cancel, resubmit, every
 * rank's stacks, copy its id), each enabled only where it applies to that job.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Clipboard, ICommandPalette, Notification } from '@jupyterlab/apputils';

import { ALL_JOBS, TERMINAL_PHASES } from '../rest/client';
import { CommandIDs } from '../ids';
import { IJobsModel, JobsModel } from '../models/jobsmodel';
import type { IJobSummary } from '../rest/types';

const CATEGORY = 'Distributed Training';

interface ISelectedCommand {
  /** The command's own id (the palette entry's). */
  id: string;
  label: string;
  /** The job command it runs with the selected job's id. */
  target: string;
  when?: (job: IJobSummary) => boolean;
}

const running = (job: IJobSummary) => !TERMINAL_PHASES.has(job.phase);

/** What the palette offers for the selected job. */
export const SELECTED_COMMANDS: readonly ISelectedCommand[] = [
  { id: 'disttrain:selected-details', label: 'Open Details', target: CommandIDs.details },
  { id: 'disttrain:selected-logs', label: 'Open Logs', target: CommandIDs.logs },
  {
    id: 'disttrain:selected-tensorboard',
    label: 'Open TensorBoard',
    target: CommandIDs.tensorboard,
    when: job => job.tensorboard
  },
  { id: 'disttrain:selected-cancel', label: 'Cancel', target: CommandIDs.cancel, when: running },
  { id: 'disttrain:selected-resubmit', label: 'Resubmit', target: CommandIDs.resubmit },
  {
    id: 'disttrain:selected-stacks',
    label: "Dump Every Rank's Stacks",
    target: CommandIDs.stacks,
    when: running
  },
  { id: 'disttrain:selected-copy-id', label: 'Copy Id', target: CommandIDs.copyId }
];

export const palettePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter_disttrain:palette',
  description:
    'Command palette entries of the jobs panel, its selected job, the Runs view and TensorBoard.',
  autoStart: true,
  requires: [IJobsModel],
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, model: JobsModel, palette: ICommandPalette | null) => {
    const { commands } = app;
    commands.addCommand(CommandIDs.copyId, {
      label: args => (args.id ? `Copy Job Id ${args.id}` : 'Copy Job Id'),
      execute: args => {
        const id = String(args.id ?? '');
        if (!id) {
          throw new Error(
            'this command needs a job id: pick a job in the Distributed training panel'
          );
        }
        Clipboard.copyToSystem(id);
        Notification.info(`Copied the job id ${id}.`, { autoClose: 3000 });
      }
    });
    for (const item of SELECTED_COMMANDS) {
      commands.addCommand(item.id, {
        label: () => {
          const job = model.selected;
          return `${item.label} of the Selected Job${job ? ` (${job.name})` : ''}`;
        },
        caption: 'Acts on the job selected in the Distributed training panel',
        isEnabled: () => {
          const job = model.selected;
          return !!job && (!item.when || item.when(job));
        },
        execute: () => {
          const job = model.selected;
          if (!job) {
            throw new Error('no job is selected: pick one in the Distributed training panel');
          }
          return commands.execute(item.target, { id: job.id });
        }
      });
    }
    // the labels and enabled states follow the selection and the job's phase
    const changed = () => commands.notifyCommandChanged();
    model.selectionChanged.connect(changed);
    model.changed.connect(changed);

    if (!palette) {
      return; // a front end without a palette (the commands still work)
    }
    palette.addItem({ command: CommandIDs.open, category: CATEGORY });
    palette.addItem({ command: CommandIDs.refresh, category: CATEGORY });
    palette.addItem({ command: CommandIDs.runs, category: CATEGORY });
    palette.addItem({
      command: CommandIDs.tensorboard,
      category: CATEGORY,
      args: { id: ALL_JOBS }
    });
    for (const item of SELECTED_COMMANDS) {
      palette.addItem({ command: item.id, category: CATEGORY });
    }
  }
};
