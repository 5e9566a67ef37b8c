/** A run's summary as `GET runs` lists it, for the tests of the Runs view's models. */
import type { IRunSummary, Phase } from '../rest/types';

export function run(
  job: string,
  name: string,
  hparams: Record<string, unknown>,
  metrics: Record<string, number | string> = {},
  phase: Phase = 'Succeeded'
): IRunSummary {
  return {
    job_id: `${job}-abcde`,
    job_name: job,
    job_phase: phase,
    run: name,
    status: 'finished',
    start_time: '2026-11-24T10:00:00.000Z',
    end_time: null,
    hparams,
    metrics,
    step: 10,
    total_steps: null,
    eta_seconds: null,
    artifacts: 0,
    tensorboard_run: `${job}-abcde/tensorboard/${name}`
  };
}
