import { filterJobs, foldJobs } from '../models/joblist';
import type { IJobSummary } from '../rest/types';
import { jobSummary } from './jobfixture';

const NOW = Date.parse('2026-11-27T12:00:00Z');
const HOUR = 3600 * 1000;

function job(id: string, extra: Partial<IJobSummary> = {}): IJobSummary {
  return jobSummary(id, { created: new Date(NOW - 2 * HOUR).toISOString(), ...extra });
}

describe('filterJobs', () => {
  const jobs = [
    job('train-aaaaa', { phase: 'Running' }),
    job('eval-bbbbb', { backend: 'kubernetes', phase: 'Failed' }),
    job('train-ccccc', { backend: 'slurm' })
  ];
  it('keeps the jobs with every word in their id, name, phase or backend', () => {
    const ids = (q: string) => filterJobs(jobs, q).map(j => j.id);
    expect(ids('')).toEqual(['train-aaaaa', 'eval-bbbbb', 'train-ccccc']);
    expect(ids('TRAIN')).toEqual(['train-aaaaa', 'train-ccccc']);
    expect(ids('failed')).toEqual(['eval-bbbbb']);
    expect(ids('train slurm')).toEqual(['train-ccccc']);
    expect(ids('ccccc')).toEqual(['train-ccccc']);
    expect(ids('nothing')).toEqual([]);
  });
});

describe('foldJobs', () => {
  const jobs = [
    job('run-aaaaa', { phase: 'Running', created: new Date(NOW - 50 * HOUR).toISOString() }),
    job('new-bbbbb', { finish_time: new Date(NOW - HOUR).toISOString() }),
    job('old-ccccc', { finish_time: new Date(NOW - 30 * HOUR).toISOString() }),
    job('gone-ddddd', { phase: 'Cancelled', created: new Date(NOW - 48 * HOUR).toISOString() })
  ];
  it('folds ended jobs older than the threshold, never a running one', () => {
    const { shown, folded } = foldJobs(jobs, 24, NOW);
    expect(shown.map(j => j.id)).toEqual(['run-aaaaa', 'new-bbbbb']);
    expect(folded.map(j => j.id)).toEqual(['old-ccccc', 'gone-ddddd']);
  });
  it('folds nothing at 0', () => {
    expect(foldJobs(jobs, 0, NOW).folded).toEqual([]);
  });
});
