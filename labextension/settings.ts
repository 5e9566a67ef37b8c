/**
 * The user's settings (schema/plugin.json) as one object every feature plugin reads, with a
 * signal when they change. Until the registry answers (or without one) the defaults apply.
 */
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import schema from './schema/plugin.json';

export interface IDistTrainSettingsValues {
  refreshInterval: number;
  logTail: number;
  tensorboardAutoReload: boolean;
  tensorboardReloadInterval: number;
  notifications: boolean;
  foldEndedAfterHours: number;
}

/** The schema's defaults, for when no registry is there (the schema is their one place). */
export const DEFAULT_SETTINGS = Object.entries(schema.properties).reduce(
  (values, [key, property]) => ({ ...values, [key]: property.default }),
  {}
) as Readonly<IDistTrainSettingsValues>;

export class DistTrainSettings {
  /** Current values (the defaults overlaid with the user's). */
  get values(): Readonly<IDistTrainSettingsValues> {
    return this._values;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Take the composite settings of the registry. */
  apply(settings: ISettingRegistry.ISettings): void {
    this._values = {
      ...DEFAULT_SETTINGS,
      ...(settings.composite as Partial<IDistTrainSettingsValues>)
    };
    this._changed.emit();
  }

  private _values: IDistTrainSettingsValues = { ...DEFAULT_SETTINGS };
  private _changed = new Signal<this, void>(this);
}

export const IDistTrainSettings = new Token<DistTrainSettings>(
  'jupyter_disttrain:IDistTrainSettings',
  'The settings of jupyter_disttrain, with a signal when they change.'
);
