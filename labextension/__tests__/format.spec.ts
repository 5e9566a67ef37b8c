import { formatDuration, jobShape, jobTiming, quietNote, rolesText } from '../render/format';
import type { IJobSummary } from '../rest/types';

const base: IJobSummary = {
  id: 'a-aaaaa',
  name: 'a',
  backend: 'local',
  phase: 'Running',
  created: '2026-11-21T10:00:00.000Z',
  start_time: '2026-11-21T10:00:05.000Z',
  finish_time: null,
  replicas_ready: 2,
  replicas_total: 2,
  nodes: 2,
  nproc_per_node: 4,
  gpus: 8,
  reason: null,
  message: null,
  deleted: false,
  launcher: 'torchrun',
  tensorboard: false,
  quiet: []
};

describe('format', () => {
  it('formats durations', () => {
    expect(formatDuration(45_000)).toBe('45s');
    expect(formatDuration(192_000)).toBe('3m 12s');
    expect(formatDuration(2 * 3600_000 + 5 * 60_000)).toBe('2h 05m');
    expect(formatDuration(3 * 86400_000 + 4 * 3600_000)).toBe('3d 4h');
    expect(formatDuration(-5)).toBe('0s');
  });

  it('says how long a job runs or ran', () => {
    const now = Date.parse('2026-11-21T10:01:05.000Z');
    expect(jobTiming(base, now)).toBe('running 1m 00s');
    expect(
      jobTiming({ ...base, phase: 'Succeeded', finish_time: '2026-11-21T10:00:50.000Z' }, now)
    ).toBe('ran 45s, 15s ago');
    expect(jobTiming({ ...base, phase: 'Pending', start_time: null }, now)).toBe('pending 1m 05s');
    // ended without a recorded end: not "running", and not counting on
    expect(jobTiming({ ...base, phase: 'Succeeded', finish_time: null }, now)).toBe(
      'started 1m 00s ago'
    );
  });

  it('describes the shape', () => {
    expect(jobShape(base)).toBe('2 × 4 GPUs');
    expect(jobShape({ ...base, gpus: 0, nodes: 1, nproc_per_node: 1 })).toBe('1 × 1 CPU proc');
  });
});

describe('rolesText', () => {
  it('lists the roles the launcher laid out, with their replica counts', () => {
    const roles = [
      { name: 'scheduler', replicas: 1 },
      { name: 'server', replicas: 2 }
    ];
    expect(rolesText(roles, [])).toBe('scheduler ×1, server ×2');
  });

  it('counts the replicas of each role when the server sent no roles', () => {
    const replicas = [{ role: 'worker' }, { role: 'worker' }, { role: 'master' }];
    expect(rolesText(undefined, replicas)).toBe('worker ×2, master ×1');
    expect(rolesText([], [])).toBe('–');
  });
});

describe('quietNote', () => {
  it('is null when no replica is quiet, so the row has no badge', () => {
    expect(quietNote({ quiet: [] })).toBeNull();
  });

  it('names the quiet replicas, the first few of many', () => {
    expect(quietNote({ quiet: ['rank-1'] })).toBe(
      'rank-1 has had no output or progress for much longer than usual'
    );
    expect(quietNote({ quiet: ['rank-1', 'rank-3'] })).toMatch(/^rank-1 and rank-3 have had/);
    expect(quietNote({ quiet: ['rank-0', 'rank-1', 'rank-2'] })).toMatch(
      /^rank-0, rank-1 and rank-2 have/
    );
    expect(quietNote({ quiet: ['rank-0', 'rank-1', 'rank-2', 'rank-3'] })).toMatch(
      /^rank-0, rank-1 and 2 more have/
    );
  });
});
