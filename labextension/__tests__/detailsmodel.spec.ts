import { JobDetailsModel } from '../models/detailsmodel';
import type { IJobDetail, Phase } from '../rest/types';

function detail(phase: Phase): IJobDetail {
  return { id: 'd-ddddd', status: { phase } } as unknown as IJobDetail;
}

/** Fetchers whose answers the test scripts, counting the calls. */
function server(answers: (IJobDetail | Error)[], script: string | Error = 'print(1)\n') {
  const calls = { job: 0, script: 0 };
  return {
    calls,
    fetchJob: async (): Promise<IJobDetail> => {
      const answer = answers[Math.min(calls.job++, answers.length - 1)];
      if (answer instanceof Error) {
        throw answer;
      }
      return answer;
    },
    fetchScript: async () => {
      calls.script++;
      if (script instanceof Error) {
        throw script;
      }
      return { entrypoint: 'train.py', script };
    }
  };
}

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

describe('JobDetailsModel', () => {
  it('keeps the last job, reports and clears errors, loads the script once', async () => {
    const fake = server([detail('Running'), new Error('server down'), detail('Running')]);
    const model = new JobDetailsModel({ jobId: 'd-ddddd', ...fake });
    let changes = 0;
    model.changed.connect(() => changes++);
    await model.refresh();
    await settle();
    expect(model.job?.status.phase).toBe('Running');
    expect(model.script).toEqual({ name: 'train.py', text: 'print(1)\n' });
    await expect(model.refresh()).rejects.toThrow('server down');
    expect(model.error).toBe('server down');
    expect(model.job?.status.phase).toBe('Running'); // the last good answer stays
    await model.refresh();
    expect(model.error).toBeNull();
    expect(fake.calls.script).toBe(1);
    expect(changes).toBe(4); // job, script, error, job
    model.dispose();
  });

  it('stops polling once the job has ended, and does not start again', async () => {
    const fake = server([detail('Running'), detail('Failed')]);
    const model = new JobDetailsModel({ jobId: 'd-ddddd', ...fake, interval: 5 });
    await model.start();
    while (!model.ended) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    await settle();
    expect(model.poll.state.phase).toBe('stopped');
    const calls = fake.calls.job;
    await model.start();
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(fake.calls.job).toBe(calls);
    model.dispose();
  });

  it('says in the script text why the script is not there', async () => {
    const model = new JobDetailsModel({
      jobId: 'd-ddddd',
      ...server([detail('Succeeded')], new Error('no such file'))
    });
    await model.refresh();
    await settle();
    expect(model.script?.text).toBe('# the packaged script is not available: no such file');
    model.dispose();
  });
});
