/** The settings plugin: owns the schema id (`jupyter_disttrain:plugin`) and provides the values. */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { PLUGIN_ID } from '../ids';
import { DistTrainSettings, IDistTrainSettings } from '../settings';

export const settingsPlugin: JupyterFrontEndPlugin<DistTrainSettings> = {
  id: PLUGIN_ID,
  description: 'Settings of the jobs panel, log viewer and TensorBoard tab.',
  autoStart: true,
  provides: IDistTrainSettings,
  optional: [ISettingRegistry],
  activate: (_app: JupyterFrontEnd, registry: ISettingRegistry | null) => {
    const settings = new DistTrainSettings();
    registry
      ?.load(PLUGIN_ID)
      .then(loaded => {
        settings.apply(loaded);
        loaded.changed.connect(settings.apply, settings);
      })
      .catch(err => console.warn('jupyter_disttrain: settings not loaded', err));
    return settings;
  }
};
