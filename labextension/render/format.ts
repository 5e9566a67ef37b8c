/** Small pure helpers for how jobs read on screen. */
import { TERMINAL_PHASES } from '../rest/types';
import type { IJobSummary, IReplicaStatus, IRoleSummary } from '../rest/types';

/** `45s`, `3m 12s`, `2h 05m`, `3d 4h`. */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return `${h}h ${String(m % 60).padStart(2, '0')}m`;
  }
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/**
 * How long ago a job started and how long it ran: "ran 3m 12s, 5m ago" / "running 45s"
 * ("started 5m ago": ended at a time not recorded).
 */
export function jobTiming(job: IJobSummary, now: number = Date.now()): string {
  const created = job.created ? Date.parse(job.created) : NaN;
  const start = job.start_time ? Date.parse(job.start_time) : created;
  const finish = job.finish_time ? Date.parse(job.finish_time) : NaN;
  if (isNaN(start)) {
    return '';
  }
  if (!isNaN(finish)) {
    return `ran ${formatDuration(finish - start)}, ${formatDuration(now - finish)} ago`;
  }
  if (TERMINAL_PHASES.has(job.phase)) {
    // ended, but when is not known (a status written without it): never counts on as if alive
    return `started ${formatDuration(now - start)} ago`;
  }
  if (job.phase === 'Pending') {
    return `pending ${formatDuration(now - (isNaN(created) ? start : created))}`;
  }
  return `running ${formatDuration(now - start)}`;
}

/** "2 × 4 GPUs" / "1 × 2 CPU procs". */
export function jobShape(job: IJobSummary): string {
  const unit = job.gpus > 0 ? 'GPU' : 'CPU proc';
  return `${job.nodes} × ${job.nproc_per_node} ${unit}${job.nproc_per_node === 1 ? '' : 's'}`;
}

/**
 * A job's roles and their replica counts: `worker ×2`, `scheduler ×1, server ×2, worker ×2`.
 * A server from before roles sends none: they are counted from the replicas.
 */
export function rolesText(
  roles: IRoleSummary[] | undefined,
  replicas: Pick<IReplicaStatus, 'role'>[]
): string {
  let counted = roles ?? [];
  if (!counted.length) {
    const counts = new Map<string, number>();
    replicas.forEach(r => counts.set(r.role, (counts.get(r.role) ?? 0) + 1));
    counted = [...counts].map(([name, n]) => ({ name, replicas: n }));
  }
  return counted.map(r => `${r.name} ×${r.replicas}`).join(', ') || '–';
}

/** Local time of an ISO timestamp, or an en dash. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) {
    return '–';
  }
  const t = new Date(iso);
  return isNaN(t.getTime()) ? iso : t.toLocaleString();
}

/**
 * A metric value as the API sends it (a number, or "NaN", "Infinity", "-Infinity", which
 * JSON cannot hold) as a number; anything else is NaN.
 */
export function metricNumber(value: unknown): number {
  if (typeof value === 'number') {
    return value;
  }
  if (value === 'Infinity' || value === '-Infinity') {
    return value === 'Infinity' ? Infinity : -Infinity;
  }
  return NaN;
}

/** A metric value with 4 significant digits; NaN and infinities said as such. */
export function formatMetric(value: unknown): string {
  const n = metricNumber(value);
  if (Number.isNaN(n)) {
    return 'NaN';
  }
  if (!Number.isFinite(n)) {
    return n > 0 ? '∞' : '−∞';
  }
  if (Number.isInteger(n) && Math.abs(n) < 1e6) {
    return String(n);
  }
  const abs = Math.abs(n);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) {
    return n.toExponential(2);
  }
  return String(Number(n.toPrecision(4)));
}

/** An hparam value as text: strings as they are, numbers like metrics, the rest as JSON. */
export function formatValue(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  if (typeof value === 'number') {
    return formatMetric(value);
  }
  if (value === null || value === undefined) {
    return '–';
  }
  return JSON.stringify(value);
}

/** "step 40 / 100 (40%), about 1m 05s left", "step 40", or '' before the first step. */
export function formatProgress(progress: {
  step: number | null;
  total_steps: number | null;
  eta_seconds: number | null;
}): string {
  const { step, total_steps: total, eta_seconds: eta } = progress;
  if (step === null) {
    return total ? `0 / ${total} steps` : '';
  }
  if (!total) {
    return `step ${step}`;
  }
  const percent = Math.round((100 * Math.min(step, total)) / total);
  const left = eta === null ? '' : `, about ${formatDuration(eta * 1000)} left`;
  return `step ${step} / ${total} (${percent}%)${left}`;
}

/** `512 B`, `12.3 MB`, `1.50 GB` (powers of 1024, as `top` and `nvidia-smi` count). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = Math.max(0, bytes);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  const digits = i === 0 ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0;
  return `${v.toFixed(digits)} ${units[i]}`;
}

/** `7 %`, `0.4 %`, `187 %` (a rank on two cores). */
export function formatPercent(percent: number): string {
  return `${percent < 10 && percent > 0 ? percent.toFixed(1) : Math.round(percent)} %`;
}

/** Why a job's row in the list has a "quiet" badge (the replicas flagged quiet, the first few
 * by name), or null when it has none. */
export function quietNote(job: Pick<IJobSummary, 'quiet'>): string | null {
  const quiet = job.quiet ?? []; // a server older than the flag sends none
  if (quiet.length === 0) {
    return null;
  }
  const named = quiet.length <= 3 ? quiet : [...quiet.slice(0, 2), `${quiet.length - 2} more`];
  const last = named[named.length - 1];
  const names = named.length === 1 ? last : `${named.slice(0, -1).join(', ')} and ${last}`;
  const verb = quiet.length === 1 ? 'has' : 'have';
  return `${names} ${verb} had no output or progress for much longer than usual`;
}
