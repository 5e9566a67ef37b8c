/** Icons of the extension (theme-aware through JupyterLab's jp-icon classes). */
import { LabIcon } from '@jupyterlab/ui-components';

export const disttrainIcon = new LabIcon({
  name: 'jupyter_disttrain:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161"><circle cx="4" cy="4" r="2.5"/><circle cx="12" cy="4" r="2.5"/>' +
    '<circle cx="8" cy="12" r="2.5"/><path d="M4 4 8 12 12 4" stroke="#616161" fill="none" ' +
    'class="jp-icon3" stroke-width="1"/></g></svg>'
});

export const chartIcon = new LabIcon({
  name: 'jupyter_disttrain:chart',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M3 3h2v16h16v2H3zm4 12 4-5 3 3 5-7 1.6 1.2-6.4 ' +
    '8.9-3-3-2.6 3.3z"/></svg>'
});
