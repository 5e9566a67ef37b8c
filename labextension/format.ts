/** Small pure helpers for how jobs read on screen. */
import type { IJobSummary, IReplicaStatus, IRoleSummary } from './types';

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

/** How long ago a job started and how long it ran: "ran 3m 12s, 5m ago" / "running 45s". */
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
