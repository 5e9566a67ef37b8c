/** Opening the job tabs (details, logs, TensorBoard): one per job, brought to front if open. */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';

/**
 * The tab `id` of `tracker`, activated, or a new one from `create`, tracked and shown.
 * Notebook 7's pages hold one main widget (the notebook) and ignore others: there the tab
 * opens in the right side panel instead.
 */
export function openTab<T extends MainAreaWidget>(
  shell: JupyterFrontEnd.IShell,
  tracker: WidgetTracker<T>,
  id: string,
  create: () => T
): T {
  const found = tracker.find(w => w.id === id);
  if (found) {
    shell.activateById(found.id);
    return found;
  }
  const widget = create();
  widget.id = id;
  widget.title.closable = true;
  void tracker.add(widget);
  shell.add(widget, 'main');
  if (!widget.isAttached) {
    shell.add(widget, 'right', { rank: 900 });
  }
  shell.activateById(widget.id);
  return widget;
}
