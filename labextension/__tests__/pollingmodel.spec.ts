import { PollingModel } from '../models/pollingmodel';

/** A model of one number; each read takes the next scripted answer (an Error is thrown). */
class Counter extends PollingModel<number> {
  constructor(
    private _answers: (number | Error | Promise<number>)[],
    interval = 5,
    ended?: () => boolean
  ) {
    super('test:counter', { interval, ended }, 60000);
  }

  value: number | null = null;
  reads = 0;
  /** Each answer's `final`. */
  finals: boolean[] = [];

  /** Done once the answer 0 was read. */
  get done(): boolean {
    return this.value === 0;
  }

  setPace(ms: number): void {
    this.pace(ms);
  }

  protected async fetch(): Promise<number> {
    const answer = this._answers[Math.min(this.reads++, this._answers.length - 1)];
    if (answer instanceof Error) {
      throw answer;
    }
    return answer;
  }

  protected apply(answer: number, final: boolean): void {
    this.value = answer;
    this.finals.push(final);
  }
}

describe('PollingModel', () => {
  it('tells the views of each answer and of each new error, keeping the last answer', async () => {
    const down = new Error('server down');
    const model = new Counter([3, down, down, new Error('no such job'), 4]);
    const seen: string[] = [];
    model.changed.connect(() => seen.push(`${model.value}:${model.error}`));
    expect(model.loaded).toBe(false);
    await model.refresh();
    await expect(model.refresh()).rejects.toBe(down);
    await expect(model.refresh()).rejects.toBe(down); // the same error: nothing new on screen
    await expect(model.refresh()).rejects.toThrow('no such job');
    await model.refresh();
    expect(seen).toEqual(['3:null', '3:server down', '3:no such job', '4:null']);
    expect(model.loaded).toBe(true);
    model.dispose();
  });

  it('stops polling once done, and start() then reads nothing', async () => {
    const model = new Counter([2, 1, 0]);
    await model.start();
    while (!model.done) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(model.poll.state.phase).toBe('stopped');
    const reads = model.reads;
    await model.start();
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(model.reads).toBe(reads);
    model.dispose();
  });

  it('drops an answer that comes after the model was disposed', async () => {
    let answer: (value: number) => void = () => undefined;
    const model = new Counter([new Promise<number>(resolve => (answer = resolve))]);
    let changes = 0;
    model.changed.connect(() => changes++);
    const reading = model.refresh();
    model.dispose();
    answer(7);
    await reading;
    expect([model.value, model.loaded, changes]).toEqual([null, false, 0]);
  });

  it('calls final the answer of a read begun after the source ended, not one during which it did', async () => {
    let ended = false;
    let answer: (value: number) => void = () => undefined;
    const during = new Promise<number>(resolve => (answer = resolve));
    const model = new Counter([1, during, 3], 5, () => ended);
    await model.refresh();
    const reading = model.refresh();
    ended = true; // while the second read is on its way
    answer(2);
    await reading;
    await model.refresh();
    expect(model.finals).toEqual([false, false, true]);
    model.dispose();
  });

  it('changes the pace without touching the backoff', () => {
    const model = new Counter([1], 2000);
    model.setPace(9000);
    expect(model.poll.frequency).toEqual(
      expect.objectContaining({ interval: 9000, backoff: true, max: 60000 })
    );
    model.dispose();
  });
});
