/** Command ids of the extension (side-effect free, shared by every module). */
export const CommandIDs = {
  open: 'disttrain:open',
  refresh: 'disttrain:refresh',
  details: 'disttrain:open-details',
  logs: 'disttrain:open-logs',
  tensorboard: 'disttrain:open-tensorboard',
  cancel: 'disttrain:cancel',
  remove: 'disttrain:delete'
} as const;

/** The plugin id; its settings schema is `labextension/schema/plugin.json`. */
export const PLUGIN_ID = 'jupyter_disttrain:plugin';
