/** A job summary for the tests: an ended two-rank local job, `extra` overriding its fields. */
import type { IJobSummary } from '../rest/types';

export function jobSummary(id: string, extra: Partial<IJobSummary> = {}): IJobSummary {
  return {
    id,
    name: id.split('-')[0],
    backend: 'local',
    phase: 'Succeeded',
    created: null,
    start_time: null,
    finish_time: null,
    replicas_ready: 0,
    replicas_total: 2,
    nodes: 1,
    nproc_per_node: 2,
    gpus: 0,
    reason: null,
    message: null,
    deleted: false,
    launcher: 'torchrun',
    tensorboard: false,
    quiet: [],
    ...extra
  };
}
