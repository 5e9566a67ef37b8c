/** Shapes of the REST API (`docs/rest-api.md`); no imports, so tests load it bare. */

export type Phase = 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Cancelled';

export const TERMINAL_PHASES: ReadonlySet<string> = new Set(['Succeeded', 'Failed', 'Cancelled']);

export interface IJobSummary {
  id: string;
  name: string;
  backend: string;
  phase: Phase;
  created: string | null;
  start_time: string | null;
  finish_time: string | null;
  replicas_ready: number;
  replicas_total: number;
  nodes: number;
  nproc_per_node: number;
  gpus: number;
  reason: string | null;
  message: string | null;
}

export interface IVolume {
  claim: string;
  mount_path: string;
  read_only: boolean;
  sub_path?: string | null;
}

export interface IJobSpec {
  name: string;
  nodes: number;
  nproc_per_node: number;
  backend: string;
  accelerator: string;
  cpu: string | null;
  memory: string | null;
  image: string | null;
  volumes: IVolume[];
  env: Record<string, string>;
  working_dir: string | null;
  max_restarts: number;
  launcher: string;
  tensorboard_dir: string | null;
  args: string[];
  entrypoint: string;
  options: Record<string, unknown>;
}

export interface IReplicaStatus {
  name: string;
  role: string;
  index: number;
  phase: Phase;
  restarts: number;
  exit_code: number | null;
  reason: string | null;
  message: string | null;
  node: string | null;
  start_time: string | null;
  finish_time: string | null;
  ready: boolean;
}

export interface ICondition {
  type: string;
  status: string;
  reason: string | null;
  message: string | null;
  last_transition_time: string | null;
}

export interface IEvent {
  time: string;
  type: string;
  reason: string;
  message: string;
  object: string | null;
  count: number;
}

export interface IJobStatus {
  job_id: string;
  phase: Phase;
  replicas: IReplicaStatus[];
  reason: string | null;
  message: string | null;
  created: string | null;
  start_time: string | null;
  finish_time: string | null;
  exit_code: number | null;
  conditions: ICondition[];
  events: IEvent[];
}

export interface IJobDetail {
  id: string;
  summary: IJobSummary;
  spec: IJobSpec;
  request: Record<string, unknown>;
  status: IJobStatus;
  deleted: boolean;
}

export interface ILogLine {
  text: string;
  replica: string;
  rank: number | null;
  offset: string;
}

export interface ILogPage {
  lines: ILogLine[];
  offset: string;
  done: boolean;
  /** The page stopped at its line or byte limit: more lines are there already. */
  more: boolean;
}

export interface ILogQuery {
  replica?: string;
  offset?: string;
  tail?: number;
  limit?: number;
}

/** TensorBoard id meaning every job's runs side by side (not a valid job id). */
export const ALL_JOBS = '_all';
