/** Command ids of the extension (side-effect free, shared by every module). */
export namespace CommandIDs {
  export const open = 'disttrain:open';
  export const refresh = 'disttrain:refresh';
  export const details = 'disttrain:open-details';
  export const logs = 'disttrain:open-logs';
  export const tensorboard = 'disttrain:open-tensorboard';
  export const cancel = 'disttrain:cancel';
  export const remove = 'disttrain:delete';
}

/** The plugin id; its settings schema is `labextension/schema/plugin.json`. */
export const PLUGIN_ID = 'jupyter_disttrain:plugin';
