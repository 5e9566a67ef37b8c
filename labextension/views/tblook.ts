/** How TensorBoard's page looks in its tab: its theme and its settings pane (no DOM, no Lumino). */

/**
 * Where TensorBoard keeps its global settings in the browser (same origin as JupyterLab, so
 * the lab page can set them before TensorBoard's page boots): `theme` (`'dark'`, `'light'` or
 * `'browser_default'`) and `timeSeriesSettingsPaneOpened`, read once when the page loads.
 */
export const TB_SETTINGS_KEY = '_tb_global_settings';

/**
 * Make TensorBoard follow JupyterLab's theme, and open with its settings pane closed unless
 * the user opened it since (TensorBoard stores that choice under the same key).
 */
export function setTensorBoardLook(dark: boolean, storage: Storage = window.localStorage): void {
  let settings: Record<string, unknown> = {};
  try {
    const stored = JSON.parse(storage.getItem(TB_SETTINGS_KEY) ?? '{}');
    settings = stored && typeof stored === 'object' && !Array.isArray(stored) ? stored : {};
  } catch {
    settings = {}; // not TensorBoard's JSON: start afresh
  }
  settings.theme = dark ? 'dark' : 'light';
  if (typeof settings.timeSeriesSettingsPaneOpened !== 'boolean') {
    settings.timeSeriesSettingsPaneOpened = false;
  }
  try {
    storage.setItem(TB_SETTINGS_KEY, JSON.stringify(settings));
  } catch {
    // storage full or disabled: TensorBoard keeps its own defaults
  }
}
