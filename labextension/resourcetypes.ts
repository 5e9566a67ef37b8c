/**
 * TEMPORARY: the resources payload shapes as announced, until the `resources` branch's
 * generated types.ts is merged (then this file goes and the imports point at ./types).
 */
export interface IGpuSample {
  index: number;
  util_percent: number;
  mem_used_bytes: number;
  mem_total_bytes: number;
}

export interface IResourceSample {
  t: number;
  cpu_percent: number;
  rss_bytes: number;
  threads: number;
  read_bytes: number;
  write_bytes: number;
  gpus?: IGpuSample[] | null;
  gpu_mem_bytes?: number | null;
}

export interface IReplicaResources {
  samples: IResourceSample[];
  ended: boolean;
  last_output: number | null;
  last_progress: number | null;
  quiet: boolean;
}

export interface IResources {
  interval: number;
  now: number;
  source: string | null;
  message: string | null;
  replicas: Record<string, IReplicaResources>;
}

export interface IStackDump {
  replica: string;
  method: string;
  text: string;
  note: string | null;
}
