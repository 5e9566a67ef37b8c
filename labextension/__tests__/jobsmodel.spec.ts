import { JobsModel } from '../models/jobsmodel';
import type { IJobSummary, Phase } from '../rest/types';
import { jobSummary } from './jobfixture';

function job(id: string, phase: Phase, created: string): IJobSummary {
  return jobSummary(id, { phase, created, start_time: created });
}

/** A server whose answers the test scripts, one list (or error) per request. */
function scripted(answers: (IJobSummary[] | Error)[]) {
  let calls = 0;
  const fetchJobs = async (): Promise<IJobSummary[]> => {
    const answer = answers[Math.min(calls++, answers.length - 1)];
    if (answer instanceof Error) {
      throw answer;
    }
    return answer;
  };
  return { fetchJobs, calls: () => calls };
}

describe('JobsModel', () => {
  it('sorts newest first and notifies only jobs that finish while watched', async () => {
    const t1 = '2026-11-21T10:00:00.000Z';
    const t2 = '2026-11-21T11:00:00.000Z';
    const t3 = '2026-11-21T12:00:00.000Z';
    const server = scripted([
      [job('old-aaaaa', 'Succeeded', t1), job('run-bbbbb', 'Running', t2)],
      [
        job('old-aaaaa', 'Succeeded', t1),
        job('run-bbbbb', 'Failed', t2),
        job('new-ccccc', 'Succeeded', t3),
        // first seen now (a job root found later), but it ended days ago: not news
        jobSummary('found-ddddd', { phase: 'Succeeded', created: t1, finish_time: t1 })
      ]
    ]);
    const now = () => Date.parse(t3) + 60 * 1000;
    const model = new JobsModel({ fetchJobs: server.fetchJobs, now });
    const finished: string[] = [];
    model.finished.connect((_, change) =>
      finished.push(`${change.job.id}:${change.previous}->${change.job.phase}`)
    );
    await model.refresh();
    expect(model.jobs.map(j => j.id)).toEqual(['run-bbbbb', 'old-aaaaa']);
    expect(finished).toEqual([]); // already finished at page load: not news
    await model.refresh();
    expect(model.jobs.map(j => j.id)).toEqual([
      'new-ccccc',
      'run-bbbbb',
      'old-aaaaa',
      'found-ddddd'
    ]);
    expect(finished).toEqual(['new-ccccc:Pending->Succeeded', 'run-bbbbb:Running->Failed']);
    model.dispose();
  });

  it('keeps the last list on errors, reports them, and the poll backs off then recovers', async () => {
    const server = scripted([
      [job('a-aaaaa', 'Running', '2026-01-01T00:00:00Z')],
      new Error('server down'),
      new Error('server down'),
      []
    ]);
    const model = new JobsModel({ fetchJobs: server.fetchJobs, interval: 5 });
    const phases: string[] = [];
    model.poll.ticked.connect((_, state) => phases.push(state.phase));
    await model.start();
    // wait for the scripted sequence: ok, error, error, ok
    while (server.calls() < 4) {
      await model.poll.tick;
    }
    await model.poll.tick;
    expect(phases).toContain('rejected');
    expect(phases).toContain('resolved');
    expect(model.error).toBeNull();
    expect(model.jobs).toEqual([]);
    model.dispose();
  });

  it('slows down while unwatched and idle, speeds up when a job runs or someone looks', async () => {
    const running = [job('r-rrrrr', 'Running', '2026-01-01T00:00:00Z')];
    const done = [job('r-rrrrr', 'Succeeded', '2026-01-01T00:00:00Z')];
    const server = scripted([done, running, done]);
    let unwatched = true;
    const model = new JobsModel({
      fetchJobs: server.fetchJobs,
      interval: 1000,
      idleInterval: 9000,
      unwatched: () => unwatched
    });
    await model.refresh();
    expect([model.idle, model.poll.frequency.interval]).toEqual([true, 9000]);
    await model.refresh();
    expect([model.idle, model.poll.frequency.interval]).toEqual([false, 1000]);
    await model.refresh();
    expect(model.poll.frequency.interval).toBe(9000);
    unwatched = false;
    await model.refresh();
    expect([model.idle, model.poll.frequency.interval]).toEqual([false, 1000]);
    model.setInterval(500);
    expect(model.poll.frequency.interval).toBe(500);
    model.dispose();
  });

  it('is watched while a view registered with watch() is visible, until it unregisters', async () => {
    const done = [job('w-wwwww', 'Succeeded', '2026-01-01T00:00:00Z')];
    const model = new JobsModel({ fetchJobs: scripted([done]).fetchJobs });
    await model.refresh();
    expect(model.idle).toBe(false); // no view registered: always watched
    let visible = false;
    const unwatch = model.watch(() => visible);
    expect(model.idle).toBe(true);
    visible = true;
    expect(model.idle).toBe(false);
    visible = false;
    const unwatchOther = model.watch(() => true);
    expect(model.idle).toBe(false);
    unwatchOther();
    expect(model.idle).toBe(true);
    unwatch();
    expect(model.idle).toBe(false);
    model.dispose();
  });
});
