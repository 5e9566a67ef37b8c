/**
 * A job's resource series for the details view: `GET jobs/<id>/resources?since=` polled
 * incrementally while the job runs, a bounded window of samples kept per replica, and the
 * measures (CPU, memory, GPU util, GPU memory) read out of them. Pure logic, no DOM.
 */
import { formatBytes, formatPercent } from '../render/format';
import type { IResources, IReplicaResources, IResourceSample } from '../rest/types';
import { IJobPollingModelOptions, JobPollingModel } from './pollingmodel';

/** Samples kept per replica: 20 minutes at the sampler's default 2 s. */
export const DEFAULT_WINDOW = 600;

/** One measure of a sample, as a sparkline and a table column show it. */
export interface IMeasure {
  key: 'cpu' | 'memory' | 'gpu' | 'gpuMemory';
  label: string;
  /** The value of a sample, or null where the sample has none (no GPU: never 0). */
  value: (s: IResourceSample) => number | null;
  /** A fixed top of the scale for a sample, if the measure has one (GPU memory: the total). */
  top?: (s: IResourceSample) => number | null;
  /** The smallest top of an automatic scale. */
  minMax: number;
  format: (v: number) => string;
  /** Only shown when some sample has it (the GPU measures). */
  optional: boolean;
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

/** The GPUs of a sample, or null where it has none (no GPU, or NVML absent). */
function gpusOf(s: IResourceSample) {
  return s.gpus && s.gpus.length ? s.gpus : null;
}

export const MEASURES: readonly IMeasure[] = [
  {
    key: 'cpu',
    label: 'CPU',
    value: s => s.cpu_percent,
    // a rank with threads uses more than one core: the scale grows past 100 %
    minMax: 100,
    format: formatPercent,
    optional: false
  },
  {
    key: 'memory',
    label: 'Memory',
    value: s => s.rss_bytes,
    minMax: 64 * 1024 ** 2,
    format: formatBytes,
    optional: false
  },
  {
    key: 'gpu',
    label: 'GPU',
    value: s => {
      const gpus = gpusOf(s);
      return gpus ? sum(gpus.map(g => g.util_percent)) / gpus.length : null;
    },
    top: () => 100,
    minMax: 100,
    format: formatPercent,
    optional: true
  },
  {
    key: 'gpuMemory',
    label: 'GPU memory',
    // this rank's own use where the sampler could tell it, else what its devices hold
    value: s => {
      const gpus = gpusOf(s);
      return s.gpu_mem_bytes ?? (gpus ? sum(gpus.map(g => g.mem_used_bytes)) : null);
    },
    top: s => {
      const gpus = gpusOf(s);
      return gpus ? sum(gpus.map(g => g.mem_total_bytes)) : null;
    },
    minMax: 64 * 1024 ** 2,
    format: formatBytes,
    optional: true
  }
];

/** The top of a measure's scale over a series: the fixed top if any, else its own maximum. */
export function measureMax(measure: IMeasure, samples: readonly IResourceSample[]): number {
  let top = 0;
  let observed = measure.minMax;
  for (const s of samples) {
    top = Math.max(top, measure.top?.(s) ?? 0);
    observed = Math.max(observed, measure.value(s) ?? 0);
  }
  return top > 0 ? top : observed;
}

/** Merge `incoming` samples after `kept` (dropping any already seen), keeping the last `window`. */
export function mergeSamples(
  kept: readonly IResourceSample[],
  incoming: readonly IResourceSample[],
  window: number
): IResourceSample[] {
  const lastT = kept.length ? kept[kept.length - 1].t : -Infinity;
  const fresh = incoming.filter(s => s.t > lastT);
  const all = fresh.length ? [...kept, ...fresh] : [...kept];
  return all.length > window ? all.slice(all.length - window) : all;
}

/**
 * Where the next incremental read starts: the last sample of the replica that is furthest
 * behind among those still running (replicas' samples may land in their files at slightly
 * different times; re-reading a few is cheap, `mergeSamples` drops them). Undefined reads all.
 */
export function nextSince(replicas: ReadonlyMap<string, IReplicaResources>): number | undefined {
  let since: number | undefined;
  let anyLive = false;
  for (const r of replicas.values()) {
    const last = r.samples.length ? r.samples[r.samples.length - 1].t : undefined;
    if (last === undefined || r.ended) {
      continue;
    }
    anyLive = true;
    since = since === undefined ? last : Math.min(since, last);
  }
  if (anyLive) {
    return since;
  }
  // every replica ended (or none sampled yet): from the newest sample on
  for (const r of replicas.values()) {
    const last = r.samples.length ? r.samples[r.samples.length - 1].t : undefined;
    if (last !== undefined) {
      since = since === undefined ? last : Math.max(since, last);
    }
  }
  return since;
}

export interface IResourcesModelOptions extends IJobPollingModelOptions {
  /** Loads samples newer than `since` (all when undefined); `getResources` in the extension. */
  fetchResources: (id: string, since?: number) => Promise<IResources>;
  /** Milliseconds between reads at least (the sampler's own interval sets the pace above it). */
  interval?: number;
  /** Samples kept per replica. */
  window?: number;
}

/** Read until the job has ended: the first read begun after its end is the last. */
export class ResourcesModel extends JobPollingModel<IResources> {
  constructor(private _options: IResourcesModelOptions) {
    super('resources', _options);
  }

  /** Replicas in rank order, with their windows of samples. */
  get replicas(): ReadonlyMap<string, IReplicaResources> {
    return this._replicas;
  }

  /** Who sampled ("sampler", "metrics.k8s.io") or null when nobody could. */
  get source(): string | null {
    return this._source;
  }

  /** The server's note about the series (e.g. why there are none). */
  get message(): string | null {
    return this._message;
  }

  /** The sampler's interval in seconds, once known. */
  get interval(): number | null {
    return this._interval;
  }

  /** The server's clock (seconds) at the last read: liveness ages are measured against it. */
  get now(): number | null {
    return this._now;
  }

  /** Whether the reads are over (the job ended and its last samples were read). */
  get done(): boolean {
    return this._done;
  }

  /** The measures some sample of the job has (the GPU ones only where there is a GPU). */
  measures(): IMeasure[] {
    const replicas = [...this._replicas.values()];
    const has = (m: IMeasure) => replicas.some(r => r.samples.some(s => m.value(s) !== null));
    return MEASURES.filter(m => !m.optional || has(m));
  }

  /** The series of one measure for one replica (null where a sample lacks it). */
  series(replica: string, measure: IMeasure): (number | null)[] {
    return (this._replicas.get(replica)?.samples ?? []).map(s => measure.value(s));
  }

  /** The replica's latest sample, if any. */
  current(replica: string): IResourceSample | null {
    const samples = this._replicas.get(replica)?.samples ?? [];
    return samples.length ? samples[samples.length - 1] : null;
  }

  /** Names of the replicas flagged quiet. */
  quiet(): string[] {
    return [...this._replicas.entries()].filter(([, r]) => r.quiet).map(([name]) => name);
  }

  /** Read what is new since the replica furthest behind. */
  protected fetch(): Promise<IResources> {
    return this._options.fetchResources(this.jobId, nextSince(this._replicas));
  }

  protected apply(answer: IResources, final: boolean): void {
    this._source = answer.source ?? null;
    this._message = answer.message ?? null;
    this._now = answer.now;
    this._interval = answer.interval;
    const merged = new Map(this._replicas);
    for (const [name, incoming] of Object.entries(answer.replicas)) {
      const kept = merged.get(name)?.samples ?? [];
      merged.set(name, {
        ...incoming,
        samples: mergeSamples(kept, incoming.samples, this._options.window ?? DEFAULT_WINDOW)
      });
    }
    const names = [...merged.keys()].sort((a, b) =>
      a.localeCompare(b, undefined, { numeric: true })
    );
    this._replicas = new Map(names.map(n => [n, merged.get(n)!]));
    // no faster than the sampler writes
    this.pace(Math.max(this._options.interval ?? 2000, (answer.interval || 0) * 1000));
    this._done = this._done || final;
  }

  private _replicas = new Map<string, IReplicaResources>();
  private _source: string | null = null;
  private _message: string | null = null;
  private _interval: number | null = null;
  private _now: number | null = null;
  private _done = false;
}
