/** Ids of the extension: its commands, plugin and sidebar (side-effect free, shared by every module). */
export const CommandIDs = {
  open: 'disttrain:open',
  refresh: 'disttrain:refresh',
  details: 'disttrain:open-details',
  logs: 'disttrain:open-logs',
  tensorboard: 'disttrain:open-tensorboard',
  runs: 'disttrain:open-runs',
  cancel: 'disttrain:cancel',
  resubmit: 'disttrain:resubmit',
  remove: 'disttrain:delete',
  stack: 'disttrain:stack',
  stacks: 'disttrain:stacks',
  diagnose: 'disttrain:diagnose',
  copyId: 'disttrain:copy-id'
} as const;

/** The plugin id; its settings schema is `labextension/schema/plugin.json`. */
export const PLUGIN_ID = 'jupyter_disttrain:plugin';

/** The job id a command was called with; says what to do when there is none. */
export function jobIdArg(args: { readonly [key: string]: unknown }): string {
  const id = args?.id;
  if (typeof id !== 'string' || !id) {
    throw new Error('this command needs a job id: pick a job in the Distributed training panel');
  }
  return id;
}

/** The id of the jobs sidebar (the browser tests and the cell buttons look for it). */
export const SIDEBAR_ID = 'jp-disttrain-sidebar';
