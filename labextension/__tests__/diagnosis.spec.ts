import { DiagnosisModel } from '../models/diagnosismodel';
import { hoursText } from '../views/diagnosis';
import type { IIncident, IJobDetail } from '../rest/types';
import { jobSummary } from './jobfixture';

const VERDICT =
  'rank-1 has not joined all_reduce #5 (default group); it is at Cell In[3], line 3 ' +
  '(`time.sleep(600)`); rank-0 waits in all_reduce at Cell In[4], line 7';

function incident(name: string, verdict = VERDICT): IIncident {
  return {
    job_id: 'late-abcde',
    name,
    time: '2026-11-28T23:20:55.379Z',
    trigger: 'manual',
    verdict,
    analyzer: 'torch',
    seconds: 0.04,
    ranks: [
      {
        replica: 'rank-0',
        state: 'waiting',
        collective: 'all_reduce #5 (default group)',
        where: 'Cell In[4], line 7',
        source: 'dist.all_reduce(t)',
        note: null,
        stack: 'Cell In[4], line 7, in <module>'
      },
      {
        replica: 'rank-1',
        state: 'not joined',
        collective: 'all_reduce #5 (default group)',
        where: 'Cell In[3], line 3',
        source: 'time.sleep(600)',
        note: null,
        stack: null
      }
    ],
    notes: []
  };
}

function job(names: string[], phase: 'Running' | 'Succeeded' = 'Running'): IJobDetail {
  return {
    id: 'late-abcde',
    summary: jobSummary('late-abcde', { phase }),
    status: { phase, replicas: [] },
    incidents: names.map(name => ({ name, time: '', trigger: 'stalled', verdict: `v of ${name}` }))
  } as unknown as IJobDetail;
}

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

describe('DiagnosisModel', () => {
  it('diagnoses on demand, says why it could not, and follows the newest incident once', async () => {
    const asked: string[] = [];
    let fail = true;
    const model = new DiagnosisModel({
      jobId: 'late-abcde',
      diagnose: async () => {
        if (fail) {
          throw new Error('job late-abcde has ended (Cancelled): a diagnosis needs a running job');
        }
        return incident('b-manual');
      },
      fetchIncident: async (_, name) => {
        asked.push(name);
        return incident(name);
      }
    });
    await model.diagnose();
    expect(model.error).toMatch(/needs a running job/);
    fail = false;
    await model.diagnose();
    expect(model.error).toBeNull();
    expect(model.incident?.name).toBe('b-manual');
    model.follow(job(['b-manual', 'a-manual']));
    expect(asked).toEqual([]); // shown already: not read again
    model.follow(job(['c-stalled', 'b-manual']));
    model.follow(job(['c-stalled', 'b-manual'])); // being read: asked once
    await settle();
    expect(asked).toEqual(['c-stalled']);
    expect(model.incident?.name).toBe('c-stalled');
  });
});

describe('resource-hours', () => {
  it('say what was allocated, what of it was used, and its cost', () => {
    const hours = { unit: 'gpu', allocated: 1.24, used: 0.81, cost: 3.1, currency: 'USD' };
    expect(hoursText(hours)).toBe('1.24 GPU-hours allocated, 0.81 used (65 %) · 3.10 USD');
    expect(hoursText({ unit: 'core', allocated: 0.004, used: 0.001 })).toBe(
      '0.0040 core-hours allocated, 0.0010 used (25 %)'
    );
  });
});
