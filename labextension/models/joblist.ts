/**
 * Which jobs the sidebar lists: those the filter box finds (every word typed in the job's id,
 * name, phase or backend), and, with no filter, the ended jobs older than a threshold folded
 * behind an "N older jobs" toggle. Pure: the sidebar and the tests share it.
 */
import { TERMINAL_PHASES } from '../rest/client';
import type { IJobSummary } from '../rest/types';

/** Jobs whose id, name, phase or backend hold every word of `query` (any case). */
export function filterJobs(jobs: readonly IJobSummary[], query: string): IJobSummary[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) {
    return [...jobs];
  }
  return jobs.filter(job => {
    const text = [job.id, job.name, job.phase, job.backend].join(' ').toLowerCase();
    return words.every(word => text.includes(word));
  });
}

/** When a job ended (its finish time, else its creation), in ms; NaN when it has not. */
function endedAt(job: IJobSummary): number {
  if (!TERMINAL_PHASES.has(job.phase)) {
    return NaN;
  }
  return Date.parse(job.finish_time ?? job.created ?? '');
}

/**
 * The jobs shown at once and those folded: ended jobs that ended more than `hours` ago
 * (0: none folded). Order is kept in both.
 */
export function foldJobs(
  jobs: readonly IJobSummary[],
  hours: number,
  now: number = Date.now()
): { shown: IJobSummary[]; folded: IJobSummary[] } {
  const shown: IJobSummary[] = [];
  const folded: IJobSummary[] = [];
  const limit = hours > 0 ? now - hours * 3600 * 1000 : -Infinity;
  for (const job of jobs) {
    (endedAt(job) < limit ? folded : shown).push(job);
  }
  return { shown, folded };
}
