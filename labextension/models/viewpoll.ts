/** The poll of a view's model: one shape for the details, the job's runs and the Runs view. */
import { Poll } from '@lumino/polling';

export interface IViewPollOptions {
  /** Milliseconds between refreshes (the default 2000). */
  interval?: number;
  /** Whether someone looks; the poll stands by while not. */
  visible?: () => boolean;
}

/**
 * `factory` every `interval` ms, not started (`start()` it), backing off up to `max` ms while it
 * rejects, standing by while the view is not visible or the browser tab is hidden.
 */
export function viewPoll(
  name: string,
  factory: () => Promise<void>,
  options: IViewPollOptions,
  max: number
): Poll {
  const visible = options.visible ?? (() => true);
  return new Poll({
    auto: false,
    factory,
    frequency: { interval: options.interval ?? 2000, backoff: true, max },
    name,
    standby: () => !visible() || 'when-hidden'
  });
}
